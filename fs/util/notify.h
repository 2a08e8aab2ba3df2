/* notify.h - tells a service manager how the daemon is doing (systemd's
 * sd_notify protocol, without libsystemd).
 *
 * A unit of Type=notify (tools/systemd/epochfs@.service) starts the daemon
 * with NOTIFY_SOCKET set to a datagram socket; the daemon sends "READY=1"
 * once the mount serves (the kernel's INIT request answered), "STOPPING=1"
 * when it begins to unmount, and STATUS= lines that `systemctl status`
 * shows. Without NOTIFY_SOCKET every call does nothing. The protocol is
 * one datagram of NEWLINE-separated KEY=VALUE lines to a unix socket whose
 * path is NOTIFY_SOCKET (a leading '@' names an abstract socket).
 */
#ifndef EPOCHFS_NOTIFY_H
#define EPOCHFS_NOTIFY_H

/* Sends MSG ("READY=1", "STATUS=...", several joined by '\n') to
 * NOTIFY_SOCKET. 1 when sent, 0 when there is no NOTIFY_SOCKET, -errno
 * when it is malformed or the send failed. Thread-safe; async-signal-safe
 * it is not (getenv). */
int notify_send(const char *msg);

/* notify_send of a printf-formatted message (at most 1 KiB). */
int notify_sendf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
