/* version.h - the one place the release number of epochfs is written.
 *
 * Every command prints it for --version, the daemon publishes it in
 * .epochfs/stats.json ("version") and .epochfs/metrics
 * (epochfs_version_info{version="..."} 1), and the man pages carry it.
 * The Python package's epochfs.__version__ must equal it: the Python
 * package test (tests/integration/t_pypkg.sh) checks that the two agree.
 */
#ifndef EPOCHFS_VERSION_H
#define EPOCHFS_VERSION_H

#define EPOCHFS_VERSION "0.2.0"

#endif
