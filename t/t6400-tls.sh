#!/bin/bash
# t6400: gem-serve over HTTPS (--tls-cert, --tls-key): a real handshake, gem-work and gem-eval
# with --cacert, a certificate signed by another CA refused (the run untouched), plain HTTP to
# the TLS port refused.
. "$(dirname "$0")/test-lib.sh"

version() {
	curl -s --cacert ca.crt "$URL/v1/health" | sed -n 's/.*"version": *\([0-9]*\).*/\1/p'
}

test_expect_success 'setup: a run, the server certificate and another CA' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 2 run &&
	self_signed ca && self_signed other &&
	grep -q "BEGIN CERTIFICATE" ca.crt && grep -q "PRIVATE KEY" ca.key
'

test_expect_success 'gem-serve --tls-cert --tls-key serves https:// and says so' '
	start_server run --tls-cert ca.crt --tls-key ca.key --keep-running &&
	case $URL in https://127.0.0.1:*) ;; *) false ;; esac &&
	grep -qx "$URL" run/serve.out
'

test_expect_success 'a TLS handshake with the CA works; without it curl refuses the server' '
	curl -sf --cacert ca.crt "$URL/v1/health" >health &&
	grep -q "\"version\"" health &&
	curl -sf --cacert ca.crt "https://localhost:${URL##*:}/v1/health" >/dev/null &&
	! curl -sf "$URL/v1/health" >/dev/null &&
	! curl -sf --cacert other.crt "$URL/v1/health" >/dev/null
'

test_expect_success 'plain HTTP to the TLS port gets no answer' '
	! curl -sf --max-time 5 "http://127.0.0.1:${URL##*:}/v1/health" >/dev/null &&
	! gem-work -q --server "http://127.0.0.1:${URL##*:}" --steps 2 --retry-for 1 \
		2>err.http &&
	cat err.http
'

test_expect_success 'a worker with another CA is refused at once, the run untouched' '
	v0=$(version) && test -n "$v0" &&
	exits 1 gem-work -q --server "$URL" --cacert other.crt --steps 5 --retry-for 30 \
		2>err.ca &&
	cat err.ca && grep -q "TLS: the server is not trusted" err.ca &&
	grep -q -i "certificate" err.ca &&
	test "$(version)" = "$v0"
'

test_expect_success 'a worker trusting the system CAs only is refused too' '
	exits 1 gem-work -q --server "$URL" --steps 5 --retry-for 30 2>err.sys &&
	grep -q "TLS: the server is not trusted" err.sys
'

test_expect_success '--cacert is for https:// servers only' '
	exits 2 gem-work -q --server "http://127.0.0.1:${URL##*:}" --cacert ca.crt \
		--steps 2 2>err.plain &&
	grep -q "https://" err.plain &&
	exits 2 gem-work -q --server "$URL" --cacert no-such.crt --steps 2 2>err.nofile &&
	grep -q "no-such.crt" err.nofile
'

test_expect_success 'gem-work --cacert trains over TLS: the version moves' '
	v0=$(version) &&
	gem-work -q --server "$URL" --cacert ca.crt --steps 20 &&
	v1=$(version) && echo "version $v0 -> $v1" && test "$v1" -gt "$v0"
'

test_expect_success 'gem-eval --cacert evaluates the served parameters; another CA is refused' '
	gem-eval --cacert ca.crt "$URL" >eval.out &&
	test "$(grep -vc "^#" eval.out)" = 1 &&
	! gem-eval --cacert other.crt --retry-for 1 "$URL" 2>err.eval &&
	grep -q "TLS" err.eval &&
	curl -sf --cacert ca.crt -X POST "$URL/v1/stop" >/dev/null &&
	wait_exit $SERVER_PID
'

test_expect_success 'gem-serve: --tls-cert without --tls-key, a key not the certificate'"'"'s' '
	exits 2 gem-serve --tls-cert ca.crt run 2>err.half &&
	grep -q "tls-key" err.half &&
	exits 2 gem-serve --tls-cert ca.crt --tls-key tiny.json run 2>err.pem &&
	grep -q "not a PEM file" err.pem &&
	exits 1 gem-serve --listen 127.0.0.1:0 --tls-cert ca.crt --tls-key other.key run \
		2>err.mismatch &&
	cat err.mismatch && test ! -e run/server.url
'
test_expect_success 'gem-run --tls --hosts: workers over (fake) ssh train over HTTPS' '
	make_fake_ssh fakebin &&
	printf "#!/bin/sh\necho localhost\n" >fakebin/hostname &&
	chmod +x fakebin/hostname &&
	FAKE_SSH_LOG=$PWD/ssh.log && export FAKE_SSH_LOG &&
	printf "nodeA\nnodeB\n" >hosts &&
	{ PATH="$PWD/fakebin:$PATH" gem-run -q --tls --hosts hosts -n 2 --epochs 1 \
		--model tiny.json --data data --batch 16 --work-opt=--slowdown=20 run-tls >eval.tsv &
	  pid=$!; } &&
	test_when_finished "stop_if_running $pid" &&
	seen() { ps -eo args | grep "gem-" | grep -v grep >ps.out; grep -q "gem-work.*https://" ps.out; } &&
	wait_until seen 60 &&
	cat ps.out &&
	grep -q "gem-serve.*--tls-cert" ps.out && grep -q "gem-work.*--cacert" ps.out &&
	! grep -q -F "$(cat run-tls/token)" ps.out &&
	wait_exit $pid 120 &&
	cat eval.tsv && test "$(grep -vc "^#" eval.tsv)" = 1 &&
	test $(grep -c "gem-remote .*gem-work .*--server https://localhost:[0-9]* .*--cacert" ssh.log.cmd) = 2 &&
	grep -q "\"url\":\"https://[^\"]*:[0-9]*\"" run-tls/log.jsonl &&
	openssl x509 -in run-tls/tls-cert.pem -noout -text | grep -q "DNS:localhost"
'
test_done
