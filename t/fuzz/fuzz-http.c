/* fuzz-http: libFuzzer target for gem-serve's request handling in process: a real server (lib/
 * role/serve.c over lib/wire/httpd.c and libmicrohttpd) on a loopback port of this process, a
 * tiny run, a token; each input goes to it as the raw bytes of one connection, and the reply is
 * read back. Routing, auth, error replies, body caps and every handler see the bytes; a crash
 * or a sanitizer report in any of them is a finding, and the server must still answer. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/err.h"
#include "role/serve.h"
#include "../tiny-run-test.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct server *srv;
static int port;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char dir[] = "/tmp/gem-fuzz-http.XXXXXX";
	char err[GEM_ERRMAX];
	struct serve_opts o = {.host = "127.0.0.1", .token = "fuzz-token", .keep_running = 1,
			       .max_staleness = -1, .max_workers = 64};
	const char *url;
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	if (!mkdtemp(dir) || tiny_run_make(dir, err) < 0 || serve_open(dir, &o, &srv, err) < 0) {
		fprintf(stderr, "fuzz-http: cannot start a server: %s\n", err);
		abort();
	}
	url = serve_url(srv);
	port = atoi(strrchr(url, ':') + 1);
	return 0;
}

/* One connection: send the bytes, end the request, read what comes back (at most 1 s). */
static ssize_t exchange(const uint8_t *data, size_t size, char *reply, size_t cap)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {.tv_sec = 1};
	ssize_t got = 0, n;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		return -1;
	}
	for (size_t off = 0; off < size; off += (size_t)n)
		if ((n = send(fd, data + off, size - off, MSG_NOSIGNAL)) <= 0)
			break;
	shutdown(fd, SHUT_WR);
	while ((size_t)got < cap && (n = recv(fd, reply + got, cap - (size_t)got, 0)) > 0)
		got += n;
	close(fd);
	return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char health[] = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	static char reply[1 << 16];
	ssize_t n;
	exchange(data, size, reply, sizeof reply);
	/* whatever came before, the server answers an honest request: at once, or after it has
	 * closed the connections it was still tearing down (up to 2 s) */
	for (int tries = 0; tries < 40; tries++) {
		n = exchange((const uint8_t *)health, sizeof health - 1, reply, sizeof reply - 1);
		if (n > 0) {
			reply[n] = 0;
			if (strstr(reply, "\"ok\""))
				return 0;
		}
		usleep(50000);
	}
	abort();
}
