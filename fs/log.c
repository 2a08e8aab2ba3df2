/* log.c - see log.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static const char *log_prog = "epochfs";
static int log_debug;

void log_init(const char *prog, int debug)
{
	if (prog)
		log_prog = prog;
	log_debug = debug;
}

int log_debug_enabled(void)
{
	return log_debug;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const tag[] = { "error: ", "warning: ", "", "debug: " };
	char line[1024];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "%s: %s", log_prog, tag[level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* Nowhere left to report a failed report. */
	}
}
