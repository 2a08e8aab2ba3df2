/* log.c - see log.h.
 *
 * DESIGN: the rate limit keys on the format string's address, which names
 * the call site for free; a small table (LIMIT_SLOTS, the oldest window
 * reused when full) under one mutex. Logging is off every hot path, so
 * the lock costs nothing that matters.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

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

#define LIMIT_SLOTS 64

static struct limit {
	const char *fmt;
	time_t window;              /* start of the current window */
	unsigned shown;             /* lines printed in it */
	unsigned long suppressed;   /* lines dropped since the last one shown */
} limits[LIMIT_SLOTS];
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether a line of call site FMT may be printed now; *SUPPRESSED gets
 * how many of its lines were dropped before this one (printed with it). */
static int allowed(const char *fmt, unsigned long *suppressed)
{
	struct timespec now;
	struct limit *l = NULL, *oldest = &limits[0];
	int ok;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	pthread_mutex_lock(&limit_lock);
	for (int i = 0; i < LIMIT_SLOTS && !l; i++) {
		if (limits[i].fmt == fmt)
			l = &limits[i];
		else if (limits[i].window < oldest->window)
			oldest = &limits[i];
	}
	if (!l) {
		l = oldest;
		*l = (struct limit){ .fmt = fmt, .window = now.tv_sec };
	}
	if (now.tv_sec - l->window >= LOG_WINDOW) {
		l->window = now.tv_sec;
		l->shown = 0;
	}
	ok = l->shown < LOG_BURST;
	if (ok) {
		l->shown++;
		*suppressed = l->suppressed;
		l->suppressed = 0;
	} else {
		l->suppressed++;
	}
	pthread_mutex_unlock(&limit_lock);
	return ok;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const tag[] = { "error: ", "warning: ", "", "debug: " };
	unsigned long suppressed = 0;
	char line[1024];
	va_list ap;
	int n;

	if (level != LOG_DEBUG && !allowed(fmt, &suppressed))
		return;
	n = snprintf(line, sizeof(line), "%s: %s", log_prog, tag[level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (suppressed && n < (int)sizeof(line) - 2)
		n += snprintf(line + n, sizeof(line) - n - 1, " (%lu more like it were not shown)",
			      suppressed);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* Nowhere left to report a failed report. */
	}
}
