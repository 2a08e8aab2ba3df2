/* mkjpeg.c - writes the odd JPEGs the integration tests need: gray, CMYK
 * (Adobe YCCK), progressive, and baseline ones (4:4:4, or 4:2:0 as cameras
 * write them) to break in other ways; the JPEG fuzzer's seeds too.
 *   mkjpeg KIND W H OUT      KIND: rgb, rgb420, gray, cmyk, progressive
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: mkjpeg rgb|rgb420|gray|cmyk|progressive W H OUT\n");
		return 2;
	}
	const char *kind = argv[1];
	int w = atoi(argv[2]), h = atoi(argv[3]);
	int pf = !strcmp(kind, "gray") ? TJPF_GRAY : !strcmp(kind, "cmyk") ? TJPF_CMYK : TJPF_RGB;
	int samp = pf == TJPF_GRAY ? TJSAMP_GRAY : !strcmp(kind, "rgb420") ? TJSAMP_420 : TJSAMP_444;
	int flags = !strcmp(kind, "progressive") ? TJFLAG_PROGRESSIVE : 0;
	int ps = tjPixelSize[pf];
	unsigned char *px = malloc((size_t)w * h * ps), *jpg = NULL;
	unsigned long len = 0;
	tjhandle tj = tjInitCompress();
	FILE *f;

	if (w <= 0 || h <= 0 || !px || !tj)
		return 1;
	for (long i = 0; i < (long)w * h * ps; i++)
		px[i] = (unsigned char)(i * 7 / 3 + i / (w * ps));
	if (tjCompress2(tj, px, w, 0, h, pf, &jpg, &len, samp, 90, flags) < 0) {
		fprintf(stderr, "mkjpeg: %s\n", tjGetErrorStr2(tj));
		return 1;
	}
	f = fopen(argv[4], "wb");
	if (!f || fwrite(jpg, 1, len, f) != len || fclose(f))
		return 1;
	tjFree(jpg);
	tjDestroy(tj);
	free(px);
	return 0;
}
