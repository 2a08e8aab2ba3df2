/* batch.h - one pre-augmented minibatch: its file format and how it is made.
 *
 * A batch file is a 128-byte little-endian header, int32 labels[n], then the
 * pixels (docs/prep-format.md is the reference for readers):
 *
 *   off  size  field
 *     0     8  magic "EPBATCH1"
 *     8     4  version (1)            12  4  header_bytes (128)
 *    16     4  n (samples)            20  4  h
 *    24     4  w                      28  4  c (3)
 *    32     4  dtype (0 uint8, 1 float32)
 *    36     4  layout (0 NHWC, 1 NCHW)
 *    40     4  epoch                  44  4  bad_samples (replaced by a substitute)
 *    48     8  index (batch number within the epoch)
 *    56     8  first (position in the epoch's order of sample 0)
 *    64     8  seed
 *    72     8  labels_offset (128)    80  8  pixels_offset (64-byte aligned)
 *    88     8  pixels_bytes           96  8  total_bytes
 *   104    24  reserved, zero
 *
 * Everything in a batch follows from (spec, epoch, index): the epoch's order
 * is a permutation drawn from (seed, epoch), each sample's crop and flip
 * from (seed, epoch, position). A batch can therefore be made again bit for
 * bit at any time.
 */
#ifndef EPOCHFS_BATCH_H
#define EPOCHFS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "jpeg.h"

#define BATCH_MAGIC "EPBATCH1"
#define BATCH_VERSION 1u
#define BATCH_HEADER_BYTES 128u

enum batch_dtype { BATCH_U8 = 0, BATCH_F32 = 1 };
enum batch_layout { BATCH_NHWC = 0, BATCH_NCHW = 1 };

struct batch_header {
	char magic[8];
	uint32_t version, header_bytes;
	uint32_t n, h, w, c;
	uint32_t dtype, layout;
	uint32_t epoch, bad_samples;
	uint64_t index, first, seed;
	uint64_t labels_offset, pixels_offset, pixels_bytes, total_bytes;
	uint8_t reserved[24];
};

/* How samples are made (the parts of a spec the pipeline needs). */
struct batch_params {
	uint32_t size;              /* output side */
	double scale[2], ratio[2], flip;
	enum batch_dtype dtype;
	enum batch_layout layout;
	float mean[3], std[3];      /* float32 only */
	uint64_t seed;
	uint64_t max_pixels;        /* refuse larger images (jpeg.h) */
};

/* Fills H for a batch of N samples and returns its total size in bytes. */
size_t batch_layout(const struct batch_params *p, uint32_t n, uint32_t epoch, uint64_t index,
		    uint64_t first, struct batch_header *h);

/* Bytes one sample's pixels take. */
size_t batch_sample_bytes(const struct batch_params *p);

/* The position-th entry of epoch EPOCH's permutation of N samples needs
 * the whole permutation: fills ORDER[0..N) (a Fisher-Yates shuffle drawn
 * from (seed, epoch)). */
void batch_order(uint64_t seed, uint32_t epoch, uint32_t n, uint32_t *order);

/* Per-thread state of the sample pipeline (grown buffers). */
struct batch_worker {
	struct jpeg_out dec;
	struct aug_scratch aug;
	uint8_t *rgb;               /* size x size x 3 */
	size_t rgb_cap;
};

void batch_worker_free(struct batch_worker *w);

/* Makes the sample at POSITION of epoch EPOCH from the JPEG bytes DATA/LEN
 * into OUT (batch_sample_bytes). 0, or -EBADMSG/-EFBIG when the image is
 * bad: OUT then holds the substitute (mid-gray; with float32, gray
 * normalized), so the batch stays whole. -ENOMEM is the only other error. */
int batch_make_sample(const struct batch_params *p, struct batch_worker *w, uint32_t epoch,
		      uint64_t position, const void *data, size_t len, void *out);

#endif
