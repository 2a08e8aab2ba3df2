/* cluster.h - the list of nodes and which one we are.
 *
 * Every node is given the same ordered list, as --peers (host[:port],
 * comma-separated), --peers-file (one host[:port] a line; blank lines and
 * '#' comments skipped) or, under SLURM, SLURM_JOB_NODELIST (hostlist
 * syntax, "gpu[01-04,07],login2") with the rank from SLURM_NODEID. Ports
 * default to the --peer-port given. IPv6 addresses go in brackets:
 * "[fd00::1]:7070". Each entry's canonical text, "host:port", names the node
 * (owner.h hashes it), so every node must be given the same spelling.
 *
 * Pure parsing: no sockets, no name resolution. Errors are one line in ERR.
 */
#ifndef EPOCHFS_CLUSTER_H
#define EPOCHFS_CLUSTER_H

#include <stddef.h>

#define CLUSTER_MAX_NODES 1024
#define CLUSTER_DEFAULT_PORT "7070"

struct cluster_node {
	char host[256];             /* without brackets */
	char port[8];
	char id[272];               /* "host:port" ("[v6]:port"): the node's name */
};

struct cluster {
	struct cluster_node *nodes;
	unsigned n;
	unsigned self;              /* our index */
};

/* Appends the comma-separated LIST. 0, or -EINVAL/-E2BIG with ERR set. */
int cluster_add_list(struct cluster *c, const char *list, const char *default_port, char *err,
		     size_t errlen);
/* Appends the entries of FILE. 0, or -errno with ERR set. */
int cluster_add_file(struct cluster *c, const char *path, const char *default_port, char *err,
		     size_t errlen);
/* Appends the hosts of the SLURM hostlist NODELIST. 0, or -EINVAL. */
int cluster_add_slurm(struct cluster *c, const char *nodelist, const char *default_port,
		      char *err, size_t errlen);
/* Checks the list (at least one node, no name twice) and sets self to RANK,
 * or, with RANK < 0, to the one entry whose host is this machine's hostname
 * (short or full). 0, or -EINVAL with ERR set. */
int cluster_finish(struct cluster *c, long rank, char *err, size_t errlen);
void cluster_free(struct cluster *c);

#endif
