#!/usr/bin/env bash
# The order-inventory demo: orders with their outbox rows -> binlog-relay -> RabbitMQ ->
# inventory service through pkg/inbox. Expects the local stack (make -C ../.. stack-up)
# and the relay binary (make -C ../.. build); `make demo` here does both.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=../..
DB=shop_demo
ORDERS=${ORDERS:-2000}
PRIMARY_DSN="root@tcp(127.0.0.1:3307)/$DB"
mysql_primary() { mariadb --no-defaults -h127.0.0.1 -P3307 -uroot "$@"; }
mysql_replica() { mariadb --no-defaults -h127.0.0.1 -P3308 -uroot "$@"; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

echo "== schema: $DB (outbox, inbox, orders, stock)"
mysql_primary -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB"
cat $ROOT/schema/producer_message.sql $ROOT/schema/consumer_message.sql schema.sql | mysql_primary "$DB"
for _ in $(seq 100); do  # the relay streams the replica: wait for the tables there
  mysql_replica -N -e "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA='$DB' AND TABLE_NAME='stock_movement'" 2>/dev/null | grep -q 1 && break
  sleep 0.1
done

echo "== inventory service (seeds 20 SKUs with 100000 each, declares the queue)"
go build -o /tmp/inventory-service ./cmd/inventory-service
go build -o /tmp/order-service ./cmd/order-service
go build -o /tmp/order-inventory-verify ./cmd/verify
/tmp/inventory-service -dsn "$PRIMARY_DSN" -seed 100000 -redis 127.0.0.1:6379 > /tmp/inventory-service.log 2>&1 &
pids+=($!)

echo "== relay"
# A fresh database needs a fresh checkpoint: resuming an old one would replay the
# previous run's outbox rows into this run's inventory.
redis-cli -h 127.0.0.1 -p 6379 DEL binlog-relay:order-inventory-demo:checkpoint >/dev/null
# The console (http.console in relay.yaml) lets whoever has this token requeue and replay.
export DEMO_CONSOLE_TOKEN=${DEMO_CONSOLE_TOKEN:-$(openssl rand -hex 16)}
echo "   console: http://127.0.0.1:9474/ui/ (sign in with the token $DEMO_CONSOLE_TOKEN)"
"${RELAY_BIN:-$ROOT/bin/binlog-relay}" run --config relay.yaml > /tmp/order-inventory-relay.log 2>&1 &
pids+=($!)
for _ in $(seq 300); do
  grep -q "binlog stream connected" /tmp/order-inventory-relay.log 2>/dev/null &&
    grep -q "broker connected" /tmp/order-inventory-relay.log && break
  kill -0 "${pids[1]}" 2>/dev/null || { tail -20 /tmp/order-inventory-relay.log; exit 1; }
  sleep 0.1
done

echo "== order service: $ORDERS orders"
/tmp/order-service -dsn "$PRIMARY_DSN" -orders "$ORDERS"

echo "== waiting for the inventory to catch up"
for i in $(seq 600); do
  if /tmp/order-inventory-verify -dsn "$PRIMARY_DSN" > /tmp/order-inventory-verify.out; then break; fi
  (( i % 20 == 0 )) && head -1 /tmp/order-inventory-verify.out
  sleep 0.1
done
cat /tmp/order-inventory-verify.out
mysql_primary "$DB" -e "SELECT status, COUNT(*) FROM producer_message GROUP BY status;
  SELECT status, COUNT(*) FROM consumer_message GROUP BY status;
  SELECT sku, initial_quantity - quantity AS deducted FROM stock ORDER BY sku LIMIT 5"
echo "== binlog-relay status"
"${RELAY_BIN:-$ROOT/bin/binlog-relay}" status --config relay.yaml
grep -q "every order deducted exactly once" /tmp/order-inventory-verify.out
if [[ ${DEMO_KEEP:-} == 1 ]]; then
  echo "== the relay keeps running for the console (http://127.0.0.1:9474/ui/); Ctrl-C stops it"
  wait "${pids[1]}"
fi
