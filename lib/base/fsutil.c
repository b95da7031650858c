#include "base/fsutil.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* The directory holding path ("." when path has no slash), so the rename can be made durable. */
static int fsync_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[4096];
	int fd, rc;
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == path)
		snprintf(dir, sizeof dir, "/");
	else if ((size_t)(slash - path) < sizeof dir)
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	else
		return -1;
	fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

int fs_write_atomicv(const char *path, const struct iovec *iov, int n, char *err)
{
	size_t plen = strlen(path);
	char *tmp = malloc(plen + 16);
	int fd, e;
	const char *what;
	if (!tmp)
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", path);
	memcpy(tmp, path, plen);
	memcpy(tmp + plen, ".tmp.XXXXXX", 12);
	fd = mkstemp(tmp);
	if (fd < 0) {
		e = errno;
		free(tmp);
		return gem_errf(err, GEM_EFAIL, "%s: cannot create temporary file: %s", path,
				strerror(e));
	}
	what = "write";
	for (int i = 0; i < n; i++)
		if (write_full(fd, iov[i].iov_base, iov[i].iov_len) < 0)
			goto fail;
	what = "chmod";
	if (fchmod(fd, 0644) < 0)
		goto fail;
	what = "fsync";
	if (fsync(fd) < 0)
		goto fail;
	what = "close";
	if (close(fd) < 0) {
		fd = -1;
		goto fail;
	}
	fd = -1;
	what = "rename";
	if (rename(tmp, path) < 0)
		goto fail;
	free(tmp);
	/* The data is in place; a failed directory fsync only weakens durability, but report it
	 * since the caller asked for a durable write. */
	if (fsync_parent(path) < 0)
		return gem_errf(err, GEM_EFAIL, "%s: fsync of directory: %s", path,
				strerror(errno));
	return 0;
fail:
	e = errno;
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	free(tmp);
	return gem_errf(err, GEM_EFAIL, "%s: %s: %s", path, what, strerror(e));
}

int fs_write_atomic(const char *path, const void *buf, size_t len, char *err)
{
	struct iovec iov = {(void *)buf, len};
	return fs_write_atomicv(path, &iov, 1, err);
}

int fs_keep_copy(const char *path, const char *copy, char *err)
{
	size_t clen = strlen(copy);
	char *tmp = malloc(clen + 16);
	void *data;
	size_t len;
	int rc = 0;
	if (!tmp)
		return gem_errf(err, GEM_ENOMEM, "%s: out of memory", copy);
	snprintf(tmp, clen + 16, "%s.tmp.link", copy);
	unlink(tmp);
	if (link(path, tmp) == 0) {
		if (rename(tmp, copy) < 0) {
			rc = gem_errf(err, GEM_EFAIL, "%s: rename: %s", copy, strerror(errno));
			unlink(tmp);
		}
	} else if (errno == ENOENT) {
		rc = 0;
	} else if ((rc = fs_read_all(path, &data, &len, SIZE_MAX - 2, err)) == 0) {
		/* a file system without hard links: a copy */
		rc = fs_write_atomic(copy, data, len, err);
		free(data);
	}
	free(tmp);
	return rc;
}

int fs_read_all(const char *path, void **buf, size_t *len, size_t max, char *err)
{
	struct stat st;
	size_t n = 0, cap;
	char *p = NULL, *q;
	int fd, e;
	*buf = NULL;
	*len = 0;
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0)
		goto fail_errno;
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return gem_errf(err, GEM_EFAIL, "%s: is a directory", path);
	}
	if (S_ISREG(st.st_mode) && (unsigned long long)st.st_size > max)
		goto too_big;
	/* st_size is a hint only (pipes, files that grow): read to EOF whatever it says. */
	cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 2 : 65536;
	for (;;) {
		ssize_t r;
		if (n + 1 >= cap || !p) {
			if (p)
				cap *= 2;
			q = realloc(p, cap);
			if (!q) {
				free(p);
				close(fd);
				return gem_errf(err, GEM_ENOMEM, "%s: out of memory", path);
			}
			p = q;
		}
		r = read(fd, p + n, cap - 1 - n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			goto fail_errno;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max)
			goto too_big;
	}
	close(fd);
	p[n] = 0;
	*buf = p;
	*len = n;
	return 0;
too_big:
	free(p);
	close(fd);
	return gem_errf(err, GEM_EFAIL, "%s: larger than %zu bytes", path, max);
fail_errno:
	e = errno;
	free(p);
	close(fd);
	return gem_errf(err, GEM_EFAIL, "%s: %s", path, strerror(e));
}

int fs_read_token(const char *file, char **token, char *err)
{
	void *buf;
	size_t len, n;
	int rc;
	/* read(2) into a buffer of ours, wiped after: stdio's would be freed with the token in it */
	if ((rc = fs_read_all(file, &buf, &len, 1 << 16, err)) < 0)
		return rc == GEM_ENOMEM ? rc : GEM_EUSAGE;
	n = strcspn(buf, "\r\n");
	*token = n ? strndup(buf, n) : NULL;
	explicit_bzero(buf, len);
	free(buf);
	if (n == 0)
		return gem_errf(err, GEM_EUSAGE, "%s: no token on the first line", file);
	if (!*token)
		return gem_errf(err, GEM_ENOMEM, "out of memory");
	return 0;
}

int fs_make_token(const char *file, char **token, char *err)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	unsigned char raw[24];
	char text[34];
	int fd, k = 0, rc = 0;
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
		return gem_errf(err, GEM_EFAIL, "getrandom: %s", strerror(errno));
	for (int i = 0; i < 24; i += 3) {
		unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8 | raw[i + 2];
		for (int j = 3; j >= 0; j--)
			text[k++] = b64[(v >> (6 * j)) & 63];
	}
	text[k++] = '\n';
	explicit_bzero(raw, sizeof raw);
	/* 0600 before a byte is in it, and so again if it was there */
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || fchmod(fd, 0600) < 0 || write(fd, text, (size_t)k) != k)
		rc = gem_errf(err, GEM_EFAIL, "%s: %s", file, strerror(errno));
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = gem_errf(err, GEM_EFAIL, "%s: %s", file, strerror(errno));
	if (rc == 0 && !(*token = strndup(text, (size_t)k - 1)))
		rc = gem_errf(err, GEM_ENOMEM, "out of memory");
	explicit_bzero(text, sizeof text);
	return rc;
}

int fs_read_pem(const char *file, char **pem, char *err)
{
	void *buf;
	size_t len;
	int rc;
	if ((rc = fs_read_all(file, &buf, &len, 1 << 20, err)) < 0)
		return rc == GEM_ENOMEM ? rc : GEM_EUSAGE;
	if (!strstr(buf, "-----BEGIN ")) {
		explicit_bzero(buf, len);
		free(buf);
		return gem_errf(err, GEM_EUSAGE, "%s: not a PEM file", file);
	}
	*pem = buf;
	return 0;
}

void fs_free_secret(char *secret)
{
	if (secret)
		explicit_bzero(secret, strlen(secret));
	free(secret);
}
