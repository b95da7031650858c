#!/bin/bash
# t3200: every update rule trains the tiny model end to end with gem-run and 2 workers.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' 'make_tiny_data data'

for rule in gem downpour dynsgd easgd dcasgd sync dma diloco async-diloco; do
	extra=
	case $rule in downpour|easgd) extra="--window 2" ;; dma|diloco|async-diloco) extra="--window 4" ;; esac
	test_expect_success "rule $rule: 2 workers learn the tiny task" "
		gem-run -q -n 2 --rule $rule $extra --model tiny.json --data data --lr 0.1 \
			--batch 32 --epochs 2 --seed 5 run-$rule >eval.tsv &&
		cat eval.tsv &&
		awk 'NR==2 { exit !(\$5 > 0.85) }' eval.tsv &&
		grep -q '\"name\": \"$rule\"' run-$rule/run.json
	"
done

test_expect_success 'sync: every round is one update of both workers' '
	python3 -c "
import json
ups=[json.loads(l) for l in open(\"run-sync/log.jsonl\") if \"event\" not in l]
assert all(u[\"tau\"]==0 for u in ups), \"sync has no staleness\"
assert len(ups)==126, len(ups)"
'

test_expect_success 'gem: per-worker commit counts are equal (each worker 2 epochs)' '
	python3 -c "
import json, collections
ups=[json.loads(l) for l in open(\"run-gem/log.jsonl\") if \"event\" not in l]
c=collections.Counter(u[\"worker\"] for u in ups); assert sorted(c.values())==[126,126], c"
'
test_done
