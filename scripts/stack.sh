#!/usr/bin/env bash
# Local test stack for binlog-relay, shared by `make test|demo|bench` and CI (.ci/run).
#
#   scripts/stack.sh up                  install what is missing, start everything (idempotent)
#   scripts/stack.sh down [--wipe]       stop our MariaDB servers (--wipe: delete STACK_DIR too)
#   scripts/stack.sh status              one line per component; exit 0 only if all healthy
#   scripts/stack.sh env                 export lines for the tests (eval "$(scripts/stack.sh env)")
#   scripts/stack.sh start|stop|restart NAME   one MariaDB server (primary|replica|replica2|misconf|switch1|switch2|switch3)
#
# Seven private mariadbd instances live under STACK_DIR (outside the repo, so several clones share
# one stack). Redis and RabbitMQ belong to the machine: reused if they answer, started otherwise,
# never stopped by `down`.
set -euo pipefail

# Where the servers keep their data: memory-backed /dev/shm when it has room, else /var/tmp. On a
# VM disk the kernel writes back what the servers wrote every 30 s in one burst, which stalls their
# commits by up to a few hundred ms: noise in every latency the tests and `make bench` measure that
# says nothing about the relay. But /dev/shm is the machine's memory: a run that fills it (binlogs
# of gigabytes, before purging) starves everything else, so a stack goes there only with
# SHM_MIN_FREE_GIB free (a bench run writes a few GiB before it purges; the long tests purge at
# their end, and binlogs expire after BINLOG_EXPIRE). A stack running in /dev/shm stays there (`up`
# warns when it is short of room); a stopped one is left and a new one starts in /var/tmp. The data
# is test data; `down --wipe` deletes it and a reboot loses it, after which `up` starts from nothing.
SHM_MIN_FREE_GIB=${STACK_SHM_MIN_FREE_GIB:-8}
shm_free_kib() { df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}'; }
running_in() { local pid; pid=$(cat "$1/primary/mysqld.pid" 2>/dev/null || true); [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; }
default_stack_dir() {
  local shm=/dev/shm/binlog-relay-stack disk=/var/tmp/binlog-relay-stack avail
  avail=$(shm_free_kib)
  if [[ -f $shm/.binlog-relay-stack ]] && running_in "$shm"; then echo "$shm"; return; fi
  # A stack still running from /var/tmp stays where it is.
  if [[ -f $disk/.binlog-relay-stack ]] && running_in "$disk"; then echo "$disk"; return; fi
  if [[ -w /dev/shm && ${avail:-0} -ge $((SHM_MIN_FREE_GIB * 1024 * 1024)) ]]; then echo "$shm"; return; fi
  if [[ ${1:-} == up ]]; then
    printf '[stack] /dev/shm has %s MiB free, under %s GiB (STACK_SHM_MIN_FREE_GIB): the stack goes to %s\n' \
      "$(( ${avail:-0} / 1024 ))" "$SHM_MIN_FREE_GIB" "$disk" >&2
    [[ -f $shm/.binlog-relay-stack ]] && printf '[stack] a stopped stack in %s is left as it is (STACK_DIR=%s %s down --wipe deletes it)\n' "$shm" "$shm" "$0" >&2
  fi
  echo "$disk"
}
STACK_DIR=${STACK_DIR:-$(default_stack_dir "${1:-}")}
BINLOG_EXPIRE=1800   # seconds; longer than make bench keeps replica2 paused
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
NAMES=(primary replica replica2 misconf switch1 switch2 switch3)
REPLICAS=(replica replica2)
# switch1, switch2 and switch3 are a topology of their own for tests that change replication itself
# (switchover, a stopped SQL thread, purged binlogs) without touching the shared servers: the
# tests set up and reset replication between them, so `up` only starts them.
declare -A PORT=([primary]=3307 [replica]=3308 [replica2]=3309 [misconf]=3310 [switch1]=3311 [switch2]=3312 [switch3]=3313)
declare -A SERVER_ID=([primary]=1 [replica]=2 [replica2]=3 [misconf]=4 [switch1]=11 [switch2]=12 [switch3]=13)
MARKER=.binlog-relay-stack   # proves STACK_DIR is ours before `down --wipe` deletes it
CHANGED=0                    # set when anything was (re)started/configured: triggers the e2e check

log() { printf '[stack %2ss] %s\n' "$SECONDS" "$*"; }
die() { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }

# wait_for SECS CMD...: poll CMD until it succeeds or the deadline passes.
wait_for() {
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do (( SECONDS < end )) || return 1; sleep 0.3; done
}

# ---------------------------------------------------------------- packages
ensure_packages() {
  local pair missing=()
  for pair in mariadbd:mariadb-server mariadb-install-db:mariadb-server mariadb:mariadb-client \
      mariadb-admin:mariadb-client redis-server:redis-server redis-cli:redis-tools \
      rabbitmq-server:rabbitmq-server rabbitmqctl:rabbitmq-server openssl:openssl \
      promtool:prometheus; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  (( ${#missing[@]} )) || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing with apt-get: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/stack-apt.log 2>&1 \
    || { tail -n 30 /tmp/stack-apt.log >&2; die "apt-get install failed"; }
}

# ---------------------------------------------------------------- MariaDB helpers
dir_of() { echo "$STACK_DIR/$1"; }
# Admin access goes through the unix socket as root (exists right after install-db);
# --no-defaults keeps /etc/mysql and ~/.my.cnf out of the picture.
sql() { local n=$1; shift; mariadb --no-defaults -uroot -S "$(dir_of "$n")/mysqld.sock" -N -B "$@"; }
is_up() { sql "$1" -e 'SELECT 1' >/dev/null 2>&1; }
slave_field() { sql "$1" --column-names -e 'SHOW SLAVE STATUS\G' 2>/dev/null | sed -n "s/^ *$2: *//p"; }

# pid_of NAME: pid of the live mariadbd started with this instance's cnf. Pid file first (and
# checked against pid reuse), else scan /proc: the pid file may be gone while the server lives.
pid_of() {
  local want p d; d=$(dir_of "$1"); want="mariadbd --defaults-file=$d/my.cnf "
  for p in "$(cat "$d/mysqld.pid" 2>/dev/null)" /proc/[0-9]*; do
    p=${p#/proc/}
    [[ -n $p && $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") == "$want" ]] && { echo "$p"; return 0; }
  done
  return 1
}
alive() { local s; [[ -r /proc/$1/stat ]] && read -r _ _ s _ <"/proc/$1/stat" && [[ $s != Z ]]; }

write_cnf() {
  local n=$1 d; d=$(dir_of "$1")
  {
    cat <<EOF
# Generated by scripts/stack.sh on every start; edits are overwritten. Read via --defaults-file
# only, so nothing from /etc/mysql leaks in.
[mysqld]
user                           = mysql
datadir                        = $d/data
socket                         = $d/mysqld.sock
pid_file                       = $d/mysqld.pid
log_error                      = $d/error.log
port                           = ${PORT[$n]}
bind_address                   = 127.0.0.1
server_id                      = ${SERVER_ID[$n]}
skip_name_resolve
log_bin                        = $d/data/binlog
relay_log                      = $d/data/relay-bin
binlog_row_image               = FULL
binlog_row_metadata            = FULL
binlog_checksum                = CRC32
log_slave_updates              = ON
gtid_strict_mode               = ON
gtid_domain_id                 = 0
# binlogs older than 30 minutes go at the next rotation: with the data in memory, test and bench
# runs would otherwise pile up gigabytes (stack.sh up sets it on running servers too)
binlog_expire_logs_seconds     = $BINLOG_EXPIRE
max_binlog_size                = 64M
max_allowed_packet             = 256M
slave_max_allowed_packet       = 1G
# commit order on replicas = primary order (the relay reads replica binlogs)
slave_parallel_threads         = 0
# notice a dead primary quickly (heartbeat = half of this)
slave_net_timeout              = 10
character_set_server           = utf8mb4
collation_server               = utf8mb4_bin
max_connections                = 500
performance_schema             = OFF
# Test stack: speed over durability. A killed mariadbd loses nothing (the OS still has the
# writes); only an OS crash would, and then we rebuild the stack anyway.
innodb_flush_log_at_trx_commit = 2
sync_binlog                    = 0
# Seven servers share a small box: keep the other buffers small.
key_buffer_size                = 8M
aria_pagecache_buffer_size     = 8M
innodb_log_buffer_size         = 16M
table_open_cache               = 1000
EOF
    if [[ $n == misconf ]]; then
      # Deliberately wrong for the relay's start-up checks; otherwise like the others.
      printf '%-30s = %s\n' binlog_format STATEMENT innodb_buffer_pool_size 64M innodb_log_file_size 48M
    elif [[ $n == switch* ]]; then
      # Small test traffic only.
      printf '%-30s = %s\n' binlog_format ROW innodb_buffer_pool_size 64M innodb_log_file_size 48M
    else
      printf '%-30s = %s\n' binlog_format ROW innodb_buffer_pool_size 256M innodb_log_file_size 256M
    fi
  } >"$d/my.cnf"
}

# init_instance NAME: create the datadir with mariadb-install-db (once; marker-guarded so an
# interrupted install is redone from scratch).
init_instance() {
  local n=$1 d; d=$(dir_of "$1")
  [[ -f $d/.installed ]] && return 0
  log "$n: initialising $d/data"
  rm -rf "$d/data" "$d/.bootstrapped"; mkdir -p "$d/data"
  write_cnf "$n"; chown -R mysql:mysql "$d"
  mariadb-install-db --defaults-file="$d/my.cnf" --auth-root-authentication-method=normal \
      --skip-test-db >"$d/install.log" 2>&1 \
    || { tail -n 30 "$d/install.log" >&2; die "$n: mariadb-install-db failed"; }
  touch "$d/.installed"; CHANGED=1
}

# start_instance NAME: start mariadbd in the background unless it already answers; wait <= 60 s.
start_instance() {
  local n=$1 d pid end; d=$(dir_of "$1")
  is_up "$n" && return 0
  [[ -f $d/.installed ]] || die "$n: not initialised (run: $0 up)"
  write_cnf "$n"; chown -R mysql:mysql "$d"
  log "$n: starting mariadbd on 127.0.0.1:${PORT[$n]}"
  # setsid: own session, so a Ctrl-C or CI job teardown of the caller doesn't hit the server;
  # stdio goes to the error log so no pipe of the caller is held open, and 9>&- so the server
  # doesn't inherit (and hold forever) our flock on the stack lock file.
  setsid mariadbd --defaults-file="$d/my.cnf" </dev/null >>"$d/error.log" 2>&1 9>&- &
  pid=$! end=$((SECONDS + 60))
  until is_up "$n"; do
    if ! { alive "$pid" || pid_of "$n" >/dev/null; } || (( SECONDS >= end )); then
      log "$n: mariadbd did not become ready; tail of $d/error.log:"
      tail -n 25 "$d/error.log" >&2; exit 1
    fi
    sleep 0.3
  done
  CHANGED=1
}

# bootstrap NAME: accounts on every server, with sql_log_bin=0. Not binlogged on purpose: the
# primary's binlog then holds only test traffic (replicas start from an empty gtid_slave_pos =
# its very first event, with nothing to collide with), and replicas never write GTIDs of
# their own, which gtid_strict_mode would reject later. repl exists everywhere for failover.
bootstrap() {
  local n=$1 d; d=$(dir_of "$1")
  [[ -f $d/.bootstrapped ]] && return 0
  sql "$n" -e "SET SESSION sql_log_bin=0;
    CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
    CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1' IDENTIFIED BY 'repl';
    GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';"
  mariadb --no-defaults -h127.0.0.1 -P"${PORT[$n]}" -uroot -e 'SELECT 1' >/dev/null \
    || die "$n: root@127.0.0.1 cannot connect over TCP"
  touch "$d/.bootstrapped"
}

# show_threads REPLICA: its replication threads and last errors, on stderr.
show_threads() { sql "$1" --column-names -e 'SHOW SLAVE STATUS\G' | grep -E 'Running|Last_.*Err' >&2 || true; }

repl_ok() { [[ $(slave_field "$1" Slave_IO_Running)/$(slave_field "$1" Slave_SQL_Running) == Yes/Yes ]]; }

# ensure_replication REPLICA: configure if never configured, START SLAVE if stopped, and wait
# for both threads (only when the primary is up: otherwise IO can only say "Connecting").
ensure_replication() {
  local n=$1
  if [[ -z $(sql "$n" -e 'SHOW SLAVE STATUS') ]]; then
    log "$n: configuring replication from primary (MASTER_USE_GTID=slave_pos)"
    sql "$n" -e "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${PORT[primary]},
      MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos"
    CHANGED=1
  fi
  repl_ok "$n" && return 0
  log "$n: START SLAVE"; sql "$n" -e 'START SLAVE'; CHANGED=1
  is_up primary || { log "$n: primary is down, not waiting for replication"; return 0; }
  wait_for 30 repl_ok "$n" || {
    show_threads "$n"
    die "$n: replication threads not running after 30 s"; }
}

# catch_up REPLICA POS: wait until REPLICA has applied POS. A replica left behind (a killed
# bench, a machine stopped mid-run) may have gigabytes to apply: wait as long as it makes
# progress (its gtid_slave_pos moves within each 30 s), and give up only when it stalls.
catch_up() {
  local r=$1 pos=$2 seen="" now
  while [[ $(sql "$r" -e "SELECT MASTER_GTID_WAIT('$pos', 30)") != 0 ]]; do
    now=$(sql "$r" -e 'SELECT @@gtid_slave_pos')
    [[ $now != "$seen" ]] || {
      show_threads "$r"
      die "$r: did not reach $pos; stuck at $now for 30 s"; }
    log "$r: catching up with the primary: at $now, target $pos"
    seen=$now
  done
}

# verify_replication: end-to-end proof that a row written on the primary reaches each replica.
verify_replication() {
  local token="ok-$$-$RANDOM" pos r
  log "verifying replication end to end"
  sql primary -e "CREATE DATABASE IF NOT EXISTS stack_check;
    CREATE TABLE IF NOT EXISTS stack_check.t (id INT AUTO_INCREMENT PRIMARY KEY, token VARCHAR(64));
    INSERT INTO stack_check.t (token) VALUES ('$token');"
  pos=$(sql primary -e 'SELECT @@gtid_binlog_pos')
  for r in "${REPLICAS[@]}"; do
    catch_up "$r" "$pos"
    [[ $(sql "$r" -e "SELECT COUNT(*) FROM stack_check.t WHERE token='$token'") == 1 ]] \
      || die "$r: reached $pos but the check row is missing"
  done
  # Drop it again and wait, so tests start from a quiet, in-sync stack.
  sql primary -e 'DROP DATABASE stack_check'; pos=$(sql primary -e 'SELECT @@gtid_binlog_pos')
  for r in "${REPLICAS[@]}"; do catch_up "$r" "$pos"; done
  log "replication ok: primary -> ${REPLICAS[*]} at gtid $pos"
}

stop_instance() {
  local n=$1 pid end
  pid=$(pid_of "$n") || { log "$n: not running"; return 0; }
  log "$n: stopping (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  end=$((SECONDS + 60))
  while alive "$pid"; do
    if (( SECONDS >= end )); then log "$n: still alive after 60 s, SIGKILL"; kill -KILL "$pid"; fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------- Redis / RabbitMQ
redis_up() { [[ $(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null) == PONG ]]; }
ensure_redis() {
  redis_up && { log "redis: already answering on 127.0.0.1:6379"; return 0; }
  local d="$STACK_DIR/redis"; mkdir -p "$d"
  log "redis: starting redis-server on 127.0.0.1:6379"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir "$d" --logfile "$d/redis.log" --pidfile "$d/redis.pid" </dev/null >/dev/null 2>&1 9>&-
  wait_for 30 redis_up || { tail -n 20 "$d/redis.log" >&2; die "redis did not answer PONG"; }
}

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
# amqp_up: send the AMQP 0-9-1 protocol header; a broker answers with a method frame (type 1).
amqp_up() {
  [[ $(timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/5672 && printf "AMQP\0\0\x09\x01" >&3 &&
       head -c1 <&3' 2>/dev/null | od -An -tx1 | tr -d ' \n') == 01 ]]
}
# Kicked off early and awaited at the end, so the broker boots while MariaDB initialises.
start_rabbit() {
  amqp_up && return 0
  log "rabbitmq: starting rabbitmq-server -detached"
  rabbitmq-server -detached </dev/null >/dev/null 2>&1 9>&- || true  # may already be booting
}
ensure_rabbit() {
  wait_for 90 amqp_up || die "rabbitmq: no AMQP on 127.0.0.1:5672 after 90 s (see /var/log/rabbitmq)"
  log "rabbitmq: AMQP answering on 127.0.0.1:5672"
  if ! rabbitmqctl -q authenticate_user guest guest >/dev/null 2>&1; then
    log "rabbitmq: guest/guest did not authenticate; (re)creating it"
    rabbitmqctl -q add_user guest guest >/dev/null 2>&1 || rabbitmqctl -q change_password guest guest
    rabbitmqctl -q set_user_tags guest administrator
    rabbitmqctl -q set_permissions -p / guest '.*' '.*' '.*'
  fi
  # Management UI is optional (nothing depends on it): enable online, never restart the broker.
  # (port probe first: is_enabled costs a second of CLI start-up)
  if [[ ${STACK_RABBIT_MGMT:-1} == 1 ]] && ! port_open 15672 \
      && ! rabbitmq-plugins -q is_enabled rabbitmq_management >/dev/null 2>&1; then
    if rabbitmq-plugins -q enable --online rabbitmq_management >/dev/null 2>&1; then
      log "rabbitmq: management plugin enabled (port 15672)"
    else log "rabbitmq: note: could not enable the management plugin (optional, skipped)"; fi
  fi
  # The consistent-hash exchange ships with the broker; per-key order end to end uses it
  # (docs/ordering.md) and so do its tests. Enabled online, never restarting the broker; the
  # enabled_plugins file spares the CLI's start-up when it is on already.
  if ! grep -qs rabbitmq_consistent_hash_exchange /etc/rabbitmq/enabled_plugins \
      && ! rabbitmq-plugins -q is_enabled rabbitmq_consistent_hash_exchange >/dev/null 2>&1; then
    if rabbitmq-plugins -q enable --online rabbitmq_consistent_hash_exchange >/dev/null 2>&1; then
      log "rabbitmq: consistent-hash exchange plugin enabled"
    else log "rabbitmq: WARNING: could not enable rabbitmq_consistent_hash_exchange (the per-key ordering tests need it)"; fi
  fi
}

# ---------------------------------------------------------------- commands
# Serialise mutating commands across clones/CI jobs sharing STACK_DIR. The lock file sits next
# to STACK_DIR, not inside it, so `down --wipe` cannot delete it under a waiting process.
lock() {
  local f="${STACK_DIR%/}.lock"
  mkdir -p "$STACK_DIR"; chmod 755 "$STACK_DIR"   # mysql must traverse it, whatever the umask
  exec 9>"$f"
  flock -n 9 && return 0
  log "waiting for another stack.sh holding $f"
  flock -w 300 9 || die "could not lock $f in 300 s"
}

cmd_up() {
  local n r
  ensure_packages; lock; touch "$STACK_DIR/$MARKER"
  start_rabbit
  for n in "${NAMES[@]}"; do
    init_instance "$n"; start_instance "$n"; bootstrap "$n"
    sql "$n" -e "SET GLOBAL binlog_expire_logs_seconds = $BINLOG_EXPIRE"   # servers started by an older cnf
  done
  for r in "${REPLICAS[@]}"; do ensure_replication "$r"; done
  if [[ $STACK_DIR == /dev/shm/* ]]; then
    local avail; avail=$(shm_free_kib)
    (( ${avail:-0} >= SHM_MIN_FREE_GIB * 1024 * 1024 )) || log "WARNING: /dev/shm has $(( ${avail:-0} / 1024 )) MiB free," \
      "under ${SHM_MIN_FREE_GIB} GiB; the running stack stays there. Purge binary logs or: $0 down --wipe && $0 up"
  fi
  if (( CHANGED )); then verify_replication; else log "mariadb: all seven already up, replication running"; fi
  ensure_redis; ensure_rabbit
  log "stack up in ${SECONDS}s (STACK_DIR=$STACK_DIR)"
}

cmd_down() {
  [[ ${1:-} == "" || $1 == --wipe ]] || die "usage: $0 down [--wipe]"
  [[ -d $STACK_DIR ]] || { log "nothing to do: $STACK_DIR does not exist"; return 0; }
  [[ ${1:-} != --wipe || ( -f $STACK_DIR/$MARKER && $STACK_DIR != / ) ]] \
    || die "refusing to wipe $STACK_DIR: no $MARKER marker (not created by '$0 up')"
  lock
  local n; for n in "${NAMES[@]}"; do stop_instance "$n"; done
  if [[ ${1:-} == --wipe ]]; then
    log "wiping $STACK_DIR"; rm -rf -- "$STACK_DIR"
  fi
  log "down (redis and rabbitmq left running: they belong to the machine)"
}

# space_of NAME: sets SPACE_LINE to what the server's data directory holds on disk (or in memory) and how much of it
# is binary logs (SHOW BINARY LOGS: the files the server still keeps).
SPACE_DATA=0; SPACE_BINLOG=0; SPACE_LINE=
space_of() {
  local n=$1 data binlog files
  data=$(du -sk "$(dir_of "$n")/data" 2>/dev/null | awk '{print $1}')
  read -r files binlog < <(sql "$n" -e 'SHOW BINARY LOGS' 2>/dev/null | awk '{n++; b+=$2} END {print n+0, b+0}')
  SPACE_DATA=$((SPACE_DATA + ${data:-0})); SPACE_BINLOG=$((SPACE_BINLOG + ${binlog:-0}))
  SPACE_LINE=$(printf '  data=%sM (binlog %sM in %s files)' "$(( ${data:-0} / 1024 ))" "$(( ${binlog:-0} / 1048576 ))" "${files:-0}")
}
space_total() {
  local where=$STACK_DIR avail
  avail=$(df -Pk "$where" 2>/dev/null | awk 'NR==2 {print $4}')
  printf 'space     %s: data=%sM of which binlog=%sM; %sM free there\n' "$where" \
    "$(( SPACE_DATA / 1024 ))" "$(( SPACE_BINLOG / 1048576 ))" "$(( ${avail:-0} / 1024 ))"
}

cmd_status() {
  local n ok=0 line io sq
  for n in "${NAMES[@]}"; do
    if ! is_up "$n"; then printf '%-9s down  127.0.0.1:%s\n' "$n" "${PORT[$n]}"; ok=1; continue; fi
    line=$(printf '%-9s up    127.0.0.1:%s  gtid=%s' "$n" "${PORT[$n]}" "$(sql "$n" -e 'SELECT @@gtid_current_pos')")
    if [[ $n == replica* ]]; then
      io=$(slave_field "$n" Slave_IO_Running); sq=$(slave_field "$n" Slave_SQL_Running)
      line+="  io=${io:-none} sql=${sq:-none} lag=$(slave_field "$n" Seconds_Behind_Master)"
      local err; err=$(slave_field "$n" Last_IO_Error)$(slave_field "$n" Last_SQL_Error)
      [[ -n $err ]] && line+="  error=\"$err\""
      [[ $io/$sq == Yes/Yes ]] || ok=1
    elif [[ $n == misconf ]]; then line+="  binlog_format=$(sql "$n" -e 'SELECT @@binlog_format')"
    elif [[ $n == switch* && -n $(sql "$n" -e 'SHOW SLAVE STATUS') ]]; then
      line+="  io=$(slave_field "$n" Slave_IO_Running) sql=$(slave_field "$n" Slave_SQL_Running) (set up by tests)"
    fi
    space_of "$n"; echo "$line$SPACE_LINE"
  done
  space_total
  if redis_up; then echo "redis     up    127.0.0.1:6379  PONG"; else echo "redis     down  127.0.0.1:6379"; ok=1; fi
  if amqp_up; then echo "rabbitmq  up    127.0.0.1:5672  AMQP"; else echo "rabbitmq  down  127.0.0.1:5672"; ok=1; fi
  return $ok
}

cmd_env() {
  local n
  for n in "${NAMES[@]}"; do
    printf "export RELAY_TEST_%s_DSN='root@tcp(127.0.0.1:%s)/'\n" "${n^^}" "${PORT[$n]}"
  done
  echo "export RELAY_TEST_AMQP_URL='amqp://guest:guest@127.0.0.1:5672/'"
  echo "export RELAY_TEST_REDIS_ADDR='127.0.0.1:6379'"
  printf 'export RELAY_STACK_DIR=%q\n' "$STACK_DIR"
}

cmd_one() {  # start|stop|restart NAME
  local verb=$1 n=${2:-}
  [[ -n $n && -v PORT[$n] ]] || die "usage: $0 $verb primary|replica|replica2|misconf|switch1|switch2|switch3"
  lock
  [[ $verb == start ]] || stop_instance "$n"
  [[ $verb == stop ]] && return 0
  start_instance "$n"
  [[ $n == replica* ]] && ensure_replication "$n"
  log "$n: up on 127.0.0.1:${PORT[$n]}"
}

case ${1:-} in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  start|stop|restart) cmd_one "$@" ;;
  *) sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 2 ;;
esac
