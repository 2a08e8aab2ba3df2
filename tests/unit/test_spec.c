/* test_spec.c - prep specs: defaults, every key, a round trip through
 * spec_render, and a clear refusal for each way a spec can be wrong. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "spec.h"

static int parse(const char *t, struct prep_spec *sp, char *err)
{
	return spec_parse(t, strlen(t), sp, err, 256);
}

Test(spec, defaults)
{
	struct prep_spec sp;
	char err[256];

	cr_assert_eq(parse("# nothing but a comment\n\n", &sp, err), 0, "%s", err);
	cr_expect(sp.batch == 64 && sp.jobs == 1 && sp.epochs == 1 && !sp.drop_last);
	cr_expect(sp.p.size == 224 && sp.p.dtype == BATCH_U8 && sp.p.layout == BATCH_NCHW);
	cr_expect(sp.p.scale[0] == 0.08 && sp.p.scale[1] == 1.0 && sp.p.flip == 0.5);
	cr_expect(sp.p.ratio[0] == 0.75 && sp.p.ratio[1] == 4.0 / 3.0);
	cr_expect_str_eq(sp.root, "");
}

Test(spec, every_key_and_a_round_trip)
{
	const char *t = "root = ./train//imgs/ \n batch=32\nsize=160\njobs=4\nseed=12345678901\n"
			"epochs=90\nscale=0.25,0.9\nratio=2/3, 3/2\nflip=0\ndrop_last=1\nlayout=nhwc\n"
			"dtype=float32 # normalized\nmean=0.5,0.5,0.5\nstd=0.25,0.25,0.25\r\n";
	struct prep_spec sp, again;
	char err[256], buf[1024];

	cr_assert_eq(parse(t, &sp, err), 0, "%s", err);
	cr_expect_str_eq(sp.root, "train/imgs");
	cr_expect(sp.batch == 32 && sp.p.size == 160 && sp.jobs == 4 && sp.epochs == 90 && sp.drop_last);
	cr_expect(sp.p.seed == 12345678901ull && sp.p.flip == 0);
	cr_expect(sp.p.ratio[0] == 2.0 / 3.0 && sp.p.ratio[1] == 1.5);
	cr_expect(sp.p.layout == BATCH_NHWC && sp.p.dtype == BATCH_F32 && sp.p.std[2] == 0.25f);
	int n = spec_render(&sp, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_eq(spec_parse(buf, (size_t)n, &again, err, sizeof(err)), 0, "%s\n%s", err, buf);
	cr_expect(!memcmp(&sp, &again, sizeof(sp)), "render/parse changed the spec:\n%s", buf);
	cr_expect_eq(spec_render(&sp, buf, 10), -ENOSPC);
}

Test(spec, bad_specs_say_why)
{
	static const struct { const char *text, *says; } bad[] = {
		{ "batch=0", "batch=0: expected a whole number from 1 to 65536" },
		{ "batch=12x", "batch=12x" },
		{ "batch=-3", "batch=-3" },
		{ "size=4", "size=4: expected a side in pixels" },
		{ "jobs=65", "jobs=65" },
		{ "epochs=0", "epochs=0" },
		{ "seed=abc", "seed=abc" },
		{ "scale=0.5,0.2", "scale=0.5,0.2: expected MIN,MAX" },
		{ "scale=0,1", "scale=0,1" },
		{ "scale=0.1", "scale=0.1" },
		{ "ratio=3/0,1", "ratio=3/0,1" },
		{ "flip=1.5", "flip=1.5: expected a probability" },
		{ "drop_last=yes", "drop_last=yes" },
		{ "layout=chw", "layout=chw: expected nchw or nhwc" },
		{ "dtype=fp16", "dtype=fp16: expected uint8 or float32" },
		{ "dtype=float32\nstd=1,0,1", "std=1,0,1" },
		{ "mean=0.5,0.5,0.5", "mean and std apply to dtype=float32 only" },
		{ "root=../etc", "root=../etc: expected a relative path inside the dataset" },
		{ "root=a/../../b", "root=a/../../b" },
		{ "root=/etc", "root=/etc" },
		{ "root=train /x", "no name starting or ending with a space" },
		{ "root=a\r/b", "no control characters" },   /* found by fuzz_text */
		{ "batch=8\nbatch=9", "line 2: 'batch' given twice" },
		{ "\n\nbtach=8", "line 3: unknown key 'btach' (known: root batch" },
		{ "just words", "line 1: expected key=value, got 'just words'" },
	};
	struct prep_spec sp;
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(parse(bad[i].text, &sp, err), -EINVAL, "accepted: %s", bad[i].text);
		cr_expect(strstr(err, bad[i].says), "'%s' said '%s'", bad[i].text, err);
	}
	char nul[] = "batch=8\0x";
	cr_expect_eq(spec_parse(nul, sizeof(nul) - 1, &sp, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "NUL"), "%s", err);
	static char big[SPEC_MAX_BYTES + 2];
	memset(big, '#', sizeof(big) - 1);
	cr_expect_eq(parse(big, &sp, err), -EINVAL);
}
