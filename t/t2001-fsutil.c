/* t2001: atomic writes replace a file whole or not at all; whole-file reads respect max; a
 * fresh token is private and new each time. */
#include "base/err.h"
#include "base/fsutil.h"
#include "tap.h"

#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

/* Files in dir whose name contains ".tmp.": leftovers of a failed write. */
static int count_temps(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d)))
		if (strstr(e->d_name, ".tmp."))
			n++;
	if (d)
		closedir(d);
	return n;
}

int main(void)
{
	char err[GEM_ERRMAX] = "", path[512], sub[512];
	void *buf;
	size_t len;
	struct iovec iov[3] = {{"head\n", 5}, {"", 0}, {"blob", 4}};
	struct rlimit old, lim;
	static char big[1 << 20];
	struct stat st;

	snprintf(dir, sizeof dir, "%s/gem-t2001.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		skip_all("cannot make a temporary directory");
	snprintf(path, sizeof path, "%s/f", dir);

	ok(fs_write_atomic(path, "hello", 5, err) == 0, "atomic write");
	ok(fs_read_all(path, &buf, &len, 100, err) == 0 && len == 5 && !memcmp(buf, "hello", 5) &&
		   ((char *)buf)[5] == 0,
	   "read it back, NUL-terminated");
	free(buf);
	ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "mode 0644");
	ok(fs_write_atomicv(path, iov, 3, err) == 0, "vectored write replaces the file");
	ok(fs_read_all(path, &buf, &len, 100, err) == 0 && len == 9 && !memcmp(buf, "head\nblob", 9),
	   "content is the concatenation");
	free(buf);
	ok(fs_read_all(path, &buf, &len, 8, err) < 0 && strstr(err, path) && !buf,
	   "a file over max is refused: %s", err);
	ok(fs_write_atomic(path, "", 0, err) == 0 && fs_read_all(path, &buf, &len, 0, err) == 0 &&
		   len == 0,
	   "empty file");
	free(buf);

	snprintf(sub, sizeof sub, "%s/no/such/dir/f", dir);
	ok(fs_write_atomic(sub, "x", 1, err) < 0 && strstr(err, sub), "missing directory: %s", err);
	snprintf(sub, sizeof sub, "%s/missing", dir);
	ok(fs_read_all(sub, &buf, &len, 100, err) < 0 && strstr(err, "missing"),
	   "missing file: %s", err);
	ok(fs_read_all(dir, &buf, &len, 100, err) < 0, "a directory is not read: %s", err);

	/* A write that fails half way (file size limit; works as root too) leaves the old file
	 * and no temporary behind. */
	fs_write_atomic(path, "old", 3, err);
	signal(SIGXFSZ, SIG_IGN);
	getrlimit(RLIMIT_FSIZE, &old);
	lim = old;
	lim.rlim_cur = 4096;
	setrlimit(RLIMIT_FSIZE, &lim);
	memset(big, 'x', sizeof big);
	ok(fs_write_atomic(path, big, sizeof big, err) < 0 && strstr(err, path),
	   "write beyond the file size limit fails: %s", err);
	setrlimit(RLIMIT_FSIZE, &old);
	ok(fs_read_all(path, &buf, &len, 100, err) == 0 && len == 3 && !memcmp(buf, "old", 3),
	   "old file intact");
	free(buf);
	ok(count_temps() == 0, "temporary removed");

	/* rename onto a non-empty directory fails after the data is written. */
	snprintf(sub, sizeof sub, "%s/d", dir);
	mkdir(sub, 0755);
	snprintf(path, sizeof path, "%s/d/x", dir);
	fs_write_atomic(path, "x", 1, err);
	ok(fs_write_atomic(sub, "y", 1, err) < 0 && strstr(err, "rename"), "rename failure: %s", err);
	ok(count_temps() == 0, "temporary removed after a failed rename");

	unlink(path);
	rmdir(sub);

	/* a token: made 0600 (even over a file that was not), read back the same, another each time */
	{
		char *t1 = NULL, *t2 = NULL, *back = NULL;
		snprintf(path, sizeof path, "%s/token", dir);
		fs_write_atomic(path, "old\n", 4, err);
		chmod(path, 0644);
		int rc = fs_make_token(path, &t1, err);
		ok(rc == 0 && t1 && strlen(t1) == 32 &&
			   strspn(t1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") == 32,
		   "a token of 32 base64 characters: %s", rc == 0 ? t1 : err);
		rc = stat(path, &st);
		ok(rc == 0 && (st.st_mode & 0777) == 0600, "its file is 0600: %o", (unsigned)(st.st_mode & 0777));
		ok(fs_read_token(path, &back, err) == 0 && t1 && !strcmp(back, t1), "read back the same");
		ok(fs_make_token(path, &t2, err) == 0 && t1 && t2 && strcmp(t1, t2), "another the next time");
		fs_free_secret(t1);
		fs_free_secret(t2);
		fs_free_secret(back);
		unlink(path);
	}

	snprintf(path, sizeof path, "%s/f", dir);
	unlink(path);
	rmdir(dir);
	return done_testing();
}
