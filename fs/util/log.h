/* log.h - one-line diagnostics on stderr, shared by the daemon and the tools.
 *
 * Every message is a single line that starts with the program name, so a user
 * (and the integration tests, which fail on unexpected "warning:"/"error:"
 * lines) can tell at a glance who complained and about what. Thread-safe: each
 * message is formatted into one buffer and written with one write(2).
 *
 * Rate limit: a message that anyone outside can cause again and again (a
 * peer that keeps connecting, a thousand corrupt images) must not flood the
 * log. Errors, warnings and information lines are limited per call site
 * (per format string): at most LOG_BURST lines in a LOG_WINDOW-second
 * window; the rest are counted, and the next line that call site prints
 * after the window says how many were suppressed. Debug lines (-d) are
 * never limited.
 */
#ifndef EPOCHFS_LOG_H
#define EPOCHFS_LOG_H

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

#define LOG_BURST 20
#define LOG_WINDOW 10

/* Sets the program name printed first and whether LOG_DEBUG lines appear. */
void log_init(const char *prog, int debug);
int log_debug_enabled(void);

void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_dbg(...)   do { if (log_debug_enabled()) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
