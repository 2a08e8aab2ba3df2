/* folder.h - an ImageFolder tree as torchvision sees it: classes and labels.
 *
 * torchvision 0.14's ImageFolder takes the sorted names of the root's
 * subdirectories as classes (label = position in that order), then for each
 * class, in that order, walks its tree with sorted(os.walk(...)): directories
 * in the string order of their full paths, files sorted by name within each,
 * keeping names that end (case-insensitively) in .jpg .jpeg .png .ppm .bmp
 * .pgm .tif .tiff .webp. A class with no such file is an error. This module
 * builds exactly that list, so label i here is label i there.
 *
 * Two differences, both deliberate: symbolic links are never followed (the
 * daemon serves nothing outside SOURCE; ImageFolder follows them), and only
 * regular files are samples. Python's sorted() on str orders by code point,
 * which for UTF-8 names is strcmp's byte order.
 */
#ifndef EPOCHFS_FOLDER_H
#define EPOCHFS_FOLDER_H

#include <stddef.h>
#include <stdint.h>

struct folder;

/* Scans directory REL below the directory fd BASE ("" or "." for BASE
 * itself). Sample paths are kept relative to BASE. 0 and *OUT; -ENOENT or
 * -ENOTDIR (REL), -ENODATA (no class directories, or a class with no image:
 * ERR names it), -ENOMEM, another -errno from reading a directory. */
int folder_scan(int base, const char *rel, struct folder **out, char *err, size_t errlen);
void folder_free(struct folder *f);

uint32_t folder_samples(const struct folder *f);
uint32_t folder_classes(const struct folder *f);
const char *folder_class(const struct folder *f, uint32_t label);
/* Sample I's path (relative to BASE) and label. */
const char *folder_path(const struct folder *f, uint32_t i);
int32_t folder_label(const struct folder *f, uint32_t i);

#endif
