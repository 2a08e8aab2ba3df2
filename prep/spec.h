/* spec.h - a prep group's spec: what a user writes to .prep/NAME.spec.
 *
 * A small text of key=value lines ('#' starts a comment, blank lines are
 * fine). Every key has a default except none is required; an unknown key,
 * a repeated key or a bad value is refused with one sentence that names the
 * line and what would be accepted, because the user reads it from
 * .prep/NAME.error or the write's EINVAL.
 *
 *   root=train        subdirectory of the dataset, ImageFolder layout (default: the dataset)
 *   batch=256         samples per batch (1..65536; default 64)
 *   size=224          output side in pixels (8..2048)
 *   jobs=4            consumers that read every batch (1..64; default 1)
 *   seed=0            order, crops and flips all follow from it
 *   epochs=90         epochs to prepare (1..1000000; default 1)
 *   scale=0.08,1.0    RandomResizedCrop area range
 *   ratio=3/4,4/3     RandomResizedCrop aspect range (fractions allowed)
 *   flip=0.5          horizontal flip probability
 *   drop_last=0       1: drop a last, short batch
 *   layout=nchw       nchw (PyTorch) or nhwc
 *   dtype=uint8       uint8, or float32 (ToTensor + Normalize with mean/std)
 *   mean=0.485,0.456,0.406   std=0.229,0.224,0.225   (float32 only)
 */
#ifndef EPOCHFS_SPEC_H
#define EPOCHFS_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"

#define SPEC_MAX_BYTES 4096
#define SPEC_ROOT_MAX 1024

struct prep_spec {
	char root[SPEC_ROOT_MAX];   /* normalized, relative, no "..": "" is the dataset itself */
	uint32_t batch, jobs, epochs;
	int drop_last;
	struct batch_params p;      /* size, scale, ratio, flip, dtype, layout, mean, std, seed */
};

/* Parses TEXT (LEN bytes). 0, or -EINVAL with a one-line reason in ERR. */
int spec_parse(const char *text, size_t len, struct prep_spec *sp, char *err, size_t errlen);

/* Writes SP back as a canonical spec (every key, one a line). Returns the
 * length, or -ENOSPC. */
int spec_render(const struct prep_spec *sp, char *buf, size_t len);

#endif
