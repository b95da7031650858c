/* fsutil: whole-file reads and crash-safe writes. A file written here is either the old one or
 * the complete new one, never half of either: data goes to a temporary file in the same
 * directory, is fsync'ed, renamed over the target, and the directory is fsync'ed. */
#ifndef GEM_FSUTIL_H
#define GEM_FSUTIL_H
#include <stddef.h>
#include <sys/uio.h>

/* Replace path with len bytes of buf atomically (mode 0644); the temporary goes on failure. */
/* 1 if path names a directory (or a link to one), 0 if not or it cannot be seen. */
int fs_is_dir(const char *path);
int fs_write_atomic(const char *path, const void *buf, size_t len, char *err);
/* Same with the concatenation of n buffers (a message header and its blobs, unconcatenated). */
int fs_write_atomicv(const char *path, const struct iovec *iov, int n, char *err);
/* Make copy hold what path holds now, atomically (copy is the old one or the new one, path is
 * untouched): a hard link where the file system has them, else a copy. Nothing when path does
 * not exist. */
int fs_keep_copy(const char *path, const char *copy, char *err);
/* Read a whole file into *buf (malloc'ed, one extra NUL byte after the data, so text is a C
 * string); files longer than max bytes are an error. The caller frees *buf. */
int fs_read_all(const char *path, void **buf, size_t *len, size_t max, char *err);
/* Read a secret (a bearer token): the first line of file, without its newline, into *token
 * (malloc'ed); an empty first line or an unreadable file is GEM_EUSAGE. */
int fs_read_token(const char *file, char **token, char *err);
/* Make a fresh secret: 24 random bytes in base64 (32 characters) on the first line of file
 * (mode 0600, replaced), and in *token (malloc'ed: fs_free_secret). */
int fs_make_token(const char *file, char **token, char *err);
/* Read a PEM file (a certificate chain, a private key) into *pem (malloc'ed, a C string; free a
 * key with fs_free_secret); an unreadable file, one over 1 MiB or one with no "-----BEGIN " line
 * is GEM_EUSAGE. */
int fs_read_pem(const char *file, char **pem, char *err);
/* Overwrite a secret (a token, a private key: a C string) with zeros, in a way the compiler
 * keeps, then free it; NULL is fine. */
void fs_free_secret(char *secret);
#endif
