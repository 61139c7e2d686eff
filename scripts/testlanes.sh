#!/usr/bin/env bash
# Usage: scripts/testlanes.sh TARGET...
#
# Runs the make targets side by side, one lane each, and exits non-zero if
# any of them failed. make test gives it one lane per server set,
# ci-mariadb (MariaDB 10.11 with RabbitMQ 3.10) and up-test-mysql (MySQL 9.7
# then MariaDB 11.8, with RabbitMQ 4.3), and ci-deploy (the release tools,
# lint, test/deploy). The lanes share no database server and no broker;
# within a lane packages run one at a time (-p 1). The few
# tests that stop or fail over a server every lane uses (the Redis Sentinel
# group and Cluster) and those that drive the machine hard hold a file lock
# (testenv.LockShared, testenv.LockHeavy) for their run.
#
# Each line a lane prints starts with its name, as it comes; at the end each
# lane's result and wall time are printed, then the failed tests of a failed
# lane and their messages again.
set -uo pipefail
cd "$(dirname "$0")/.."
(($# > 0)) || { sed -n '2,16s/^# \{0,1\}//p' "$0"; exit 2; }

results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
# A stop (Ctrl-C, CI's timeout) stops every lane and what it started.
trap 'pkill -TERM -P $$ 2>/dev/null; exit 130' INT TERM

for lane in "$@"; do
  (
    began=$SECONDS
    make --no-print-directory "$lane" 2>&1 | tee "$results/$lane.log" | awk -v p="[$lane] " '{ print p $0; fflush() }'
    echo "${PIPESTATUS[0]} $((SECONDS - began))" >"$results/$lane"
  ) &
done
wait

failed=0
echo "lanes:"
for lane in "$@"; do
  read -r rc took <"$results/$lane" 2>/dev/null || { rc=lost; took=?; }
  if [[ $rc == 0 ]]; then r=ok; else r="FAILED (exit $rc)"; failed=1; fi
  printf '  %-14s %s in %s s\n' "$lane" "$r" "$took"
done
# A failed lane's failures again, last, where a log's tail shows them: the
# failed tests and their messages (go test without -v prints the log of
# failed tests only), at most 80 lines a lane.
for lane in "$@"; do
  [[ -s $results/$lane.log ]] || continue
  grep -q -E -e '--- FAIL|^panic:|^FAIL' "$results/$lane.log" || continue
  echo "failures in $lane:"
  grep -E -e '--- FAIL|^panic:|test timed out|^FAIL|_test\.go:[0-9]+:' "$results/$lane.log" |
    cut -c1-400 | head -80 | sed "s/^/  [$lane] /"
done
exit $failed
