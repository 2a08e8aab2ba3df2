/* libFuzzer harness for the text a user hands the daemon: a prep spec
 * (.prep/NAME.spec), a peer list (--peers) and a SLURM hostlist
 * (SLURM_JOB_NODELIST). The first input byte picks the parser. Beyond "no
 * crash, no leak", a spec that parses renders to text that parses to the
 * same spec again (epochfs-prep compares rendered specs), and a refusal
 * always says why. `make test` runs it briefly, `make fuzz` longer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void spec_case(const char *text, size_t len)
{
	struct prep_spec a, b;
	char err[256], ra[2048], rb[2048];

	if (spec_parse(text, len, &a, err, sizeof(err)) < 0) {
		if (!err[0])
			__builtin_trap();       /* a refusal names its reason */
		return;
	}
	int na = spec_render(&a, ra, sizeof(ra));
	if (na < 0 || spec_parse(ra, (size_t)na, &b, err, sizeof(err)) < 0)
		__builtin_trap();           /* a parsed spec renders to a valid one */
	int nb = spec_render(&b, rb, sizeof(rb));
	if (nb != na || memcmp(ra, rb, (size_t)na))
		__builtin_trap();           /* ... that means the same */
}

static void cluster_case(const char *text, int slurm)
{
	struct cluster c = { 0 };
	char err[256];
	int r;

	err[0] = '\0';
	r = slurm ? cluster_add_slurm(&c, text, "7070", err, sizeof(err))
		  : cluster_add_list(&c, text, "7070", err, sizeof(err));
	if (r < 0 && !err[0])
		__builtin_trap();
	if (r == 0) {
		if (c.n > CLUSTER_MAX_NODES)
			__builtin_trap();
		for (unsigned i = 0; i < c.n; i++)
			if (!c.nodes[i].host[0] || !memchr(c.nodes[i].id, '\0', sizeof(c.nodes[i].id)))
				__builtin_trap();
		cluster_finish(&c, 0, err, sizeof(err));
	}
	cluster_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	/* The C-string parsers get a terminated copy of the rest. */
	char *text = malloc(size);
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	switch (data[0] % 3) {
	case 0: spec_case(text, size - 1); break;
	case 1: cluster_case(text, 0); break;
	case 2: cluster_case(text, 1); break;
	}
	free(text);
	return 0;
}
