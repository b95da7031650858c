#!/bin/bash
# t6310: gem-serve wipes its secrets before it frees them: no block it frees holds a line of the
# TLS private key or the bearer token (a free() that looks, preloaded), but for GnuTLS's own
# copies while it decodes the key, which are out of gem's hands. Memory given back unwiped could
# be read later in a core dump or by whatever reuses it.
. "$(dirname "$0")/test-lib.sh"

if ldd "$(command -v gem-serve)" 2>/dev/null | grep -q -E 'lib[at]san'; then
	test_skip_all 'a sanitizer build has its own free()'
fi
command -v cc >/dev/null && command -v openssl >/dev/null ||
	test_skip_all 'needs cc and openssl'

test_expect_success 'setup: a run, a certificate and its key, a token, a free() that looks' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 2 run &&
	openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
		-addext "subjectAltName=IP:127.0.0.1" -keyout s.key -out s.crt 2>/dev/null &&
	echo "t6310-token-$$-$RANDOM$RANDOM" >token &&
	cat >looks.c <<-\EOF &&
	#define _GNU_SOURCE
	#include <execinfo.h>
	#include <malloc.h>
	#include <stdlib.h>
	#include <string.h>
	#include <unistd.h>
	extern void __libc_free(void *p);
	static __thread int looking;
	/* Say on stderr when a block freed holds one of the marks, and whether GnuTLS freed it
	 * (its PEM decoding frees copies it does not wipe: outside gem, said, not failed). */
	void free(void *p)
	{
		const char *names[2] = {"KEY_MARK", "TOKEN_MARK"};
		for (int i = 0; p && !looking && i < 2; i++) {
			const char *m = getenv(names[i]);
			void *bt[32];
			char **sym;
			int n, tls = 0;
			if (!m || !*m || !memmem(p, malloc_usable_size(p), m, strlen(m)))
				continue;
			looking = 1;
			n = backtrace(bt, 32);
			sym = backtrace_symbols(bt, n);
			for (int k = 1; sym && k < n; k++)
				tls |= strstr(sym[k], "libgnutls") != NULL;
			__libc_free(sym);
			looking = 0;
			write(2, tls ? "GnuTLS freed unwiped: " : "freed unwiped: ", tls ? 22 : 15);
			write(2, names[i], strlen(names[i]));
			write(2, "\n", 1);
		}
		__libc_free(p);
	}
	EOF
	cc -shared -fPIC -O1 -o looks.so looks.c &&
	KEY_MARK=$(sed -n 2p s.key) && test ${#KEY_MARK} -ge 40 &&
	TOKEN=$(cat token)
'

test_expect_success 'gem-serve over TLS with a token, stopped: neither freed unwiped' '
	KEY_MARK=$KEY_MARK TOKEN_MARK=$TOKEN LD_PRELOAD=$PWD/looks.so \
		start_server run --tls-cert s.crt --tls-key s.key --token-file token \
		--keep-running &&
	curl -sf --cacert s.crt "$URL/v1/health" >/dev/null &&
	curl -sf --cacert s.crt -X POST -H "Authorization: Bearer $TOKEN" "$URL/v1/stop" \
		>/dev/null &&
	wait_exit $SERVER_PID &&
	cat run/serve.err &&
	! grep "^freed unwiped" run/serve.err
'

test_expect_success 'the free() that looks sees an unwiped secret (the check can fail)' '
	cat >leak.c <<-\EOF &&
	#include <stdlib.h>
	#include <string.h>
	int main(int argc, char **argv)
	{
		char *s = strdup(argc > 1 ? argv[1] : "");
		free(s);
		return 0;
	}
	EOF
	cc -o leak leak.c &&
	KEY_MARK=$KEY_MARK LD_PRELOAD=$PWD/looks.so ./leak "x$KEY_MARK" 2>leak.err &&
	grep -q "freed unwiped: KEY_MARK" leak.err
'

test_done
