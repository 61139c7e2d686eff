#!/usr/bin/env bash
# Local test stack for binlog-relay, shared by `make test|demo|bench` and CI (.ci/run).
#
#   scripts/stack.sh up [FLAVOR...]      install what is missing, start everything (idempotent)
#   scripts/stack.sh down [--wipe]       stop our database servers, Redis topologies and RabbitMQ 4 and unmount the chroots'
#                                        /proc, /dev and /run (--wipe: delete STACK_DIR too)
#   scripts/stack.sh status              one line per component with its version; exit 0 only if all healthy
#   scripts/stack.sh env [FLAVOR]        export lines for the tests (eval "$(scripts/stack.sh env mysql-9.7)")
#   scripts/stack.sh start|stop|restart NAME   one server of $RELAY_TEST_FLAVOR (NAME or FLAVOR/NAME)
#   scripts/stack.sh rabbitmqctl ARGS... rabbitmqctl of the broker $RELAY_TEST_FLAVOR uses
#   scripts/stack.sh packages            install with apt-get what the stack needs from Debian 12, nothing else
#   scripts/stack.sh chroots             build (side by side) and mount the two sid chroots, nothing else (make test starts it early)
#   scripts/stack.sh redis-topologies    start what is down of the Redis Sentinel group and Cluster (idempotent)
#   scripts/stack.sh rabbit-cluster      start what is down of a three-node RabbitMQ 4.3 cluster (idempotent; on request only)
#   scripts/stack.sh rabbit-cluster-ctl NODE ARGS...  rabbitmqctl of that cluster's node rclu1, rclu2 or rclu3
#
# Three flavours, each a set of seven private servers (primary replica replica2 misconf switch1
# switch2 switch3) under STACK_DIR (outside the repo, so several clones share one stack):
#   mariadb-10.11  Debian 12's MariaDB, ports 3307-3313, with the machine's RabbitMQ 3.10 (5672)
#   mysql-9.7      MySQL 9.7 from a Debian sid chroot, ports 3317-3323, with RabbitMQ 4.3 (5673)
#   mariadb-11.8   MariaDB 11.8 (the current LTS) from a second sid chroot (Debian's MariaDB and
#                  MySQL packages conflict), ports 3327-3333, with RabbitMQ 4.3 (5673)
# `up` with no FLAVOR starts all three. The chroots are built once with debootstrap from the Debian
# archive and kept under CHROOT_BASE (reused across runs and stack wipes). Redis and RabbitMQ 3.10
# belong to the machine: reused if they answer, started otherwise, never stopped by `down`.
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
declare -A OFFSET=([primary]=0 [replica]=1 [replica2]=2 [misconf]=3 [switch1]=4 [switch2]=5 [switch3]=6)
declare -A SERVER_ID=([primary]=1 [replica]=2 [replica2]=3 [misconf]=4 [switch1]=11 [switch2]=12 [switch3]=13)

# ---------------------------------------------------------------- flavours
FLAVORS=(mariadb-10.11 mysql-9.7 mariadb-11.8)
declare -A BASE_PORT=([mariadb-10.11]=3307 [mysql-9.7]=3317 [mariadb-11.8]=3327)
# Data of the first flavour stays where it always was ($STACK_DIR/primary, ...).
declare -A SUBDIR=([mariadb-10.11]="" [mysql-9.7]=mysql-9.7/ [mariadb-11.8]=mariadb-11.8/)
declare -A CHROOT_OF=([mariadb-10.11]="" [mysql-9.7]=mysql [mariadb-11.8]=mariadb)
declare -A AMQP_PORT_OF=([mariadb-10.11]=5672 [mysql-9.7]=5673 [mariadb-11.8]=5673)
# The chroots, built once and kept: debootstrap's minbase of Debian sid plus the servers. The
# archive's Release files may have passed their Valid-Until date (a frozen snapshot), hence
# Check-Valid-Until=false; the packages are still verified against the archive's keys.
CHROOT_BASE=${STACK_CHROOT_BASE:-/var/cache/binlog-relay/chroot}
DEBIAN_MIRROR=${STACK_DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
declare -A CHROOT_PKGS=([mysql]="mysql-server mysql-client rabbitmq-server" [mariadb]="mariadb-server mariadb-client")
RABBIT4_NODE=rabbit4@localhost RABBIT4_DIST_PORT=25673 RABBIT4_MGMT_PORT=15673

FLAVOR=mariadb-10.11   # the flavour the helpers below act on (set_flavor)
set_flavor() {
  [[ -v BASE_PORT[$1] ]] || die "unknown flavour '$1' (one of: ${FLAVORS[*]})"
  FLAVOR=$1
}
chroot_dir() { local c=${CHROOT_OF[$FLAVOR]}; [[ -n $c ]] && echo "$CHROOT_BASE/$c"; }
# in_root CMD...: run CMD on the host, or inside the flavour's chroot.
in_root() { local c; c=$(chroot_dir) || true; if [[ -n $c ]]; then chroot "$c" "$@"; else "$@"; fi; }
is_mysql() { [[ $FLAVOR == mysql-* ]]; }
port_of() { echo $(( ${BASE_PORT[$FLAVOR]} + ${OFFSET[$1]} )); }
server_bin() { if is_mysql; then echo /usr/sbin/mysqld; else echo /usr/sbin/mariadbd; fi; }
# SQL words that differ: MySQL 9 removed SHOW SLAVE STATUS, START SLAVE and SHOW MASTER STATUS.
replica_status_sql() { if is_mysql; then echo 'SHOW REPLICA STATUS'; else echo 'SHOW SLAVE STATUS'; fi; }
io_field() { if is_mysql; then echo Replica_IO_Running; else echo Slave_IO_Running; fi; }
sql_field() { if is_mysql; then echo Replica_SQL_Running; else echo Slave_SQL_Running; fi; }
lag_field() { if is_mysql; then echo Seconds_Behind_Source; else echo Seconds_Behind_Master; fi; }
gtid_var() { if is_mysql; then echo gtid_executed; else echo gtid_binlog_pos; fi; }

CHANGED=0                    # set when anything was (re)started/configured: triggers the e2e check
MARKER=.binlog-relay-stack   # proves STACK_DIR is ours before `down --wipe` deletes it

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
      promtool:prometheus debootstrap:debootstrap mountpoint:util-linux redis-sentinel:redis-sentinel \
      chromium:chromium; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  # chromium: test/integration/console_browser_test.go drives the operator's console in it
  # (headless, through chromedp).
  # pika, the Python AMQP client: test/integration/presets_consumer_test.go consumes with it (a
  # consumer that is not Go). Debian's python3 is asked, which the package installs into.
  /usr/bin/python3 -c 'import pika' >/dev/null 2>&1 || missing+=(python3-pika)
  (( ${#missing[@]} )) || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing with apt-get: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/stack-apt.log 2>&1 \
    || { tail -n 30 /tmp/stack-apt.log >&2; die "apt-get install failed"; }
}

# ---------------------------------------------------------------- chroots
# mount_chroot DIR: proc, dev (recursively: /dev/shm is where the stack's data usually is), a
# tmpfs run dir, the host's /etc/hosts, and STACK_DIR at the same path, so that the servers
# inside and the tests outside name every file alike. Idempotent.
mount_chroot() {
  local c=$1
  mountpoint -q "$c/proc" || mount -t proc proc "$c/proc"
  mountpoint -q "$c/dev" || mount --rbind /dev "$c/dev"
  mountpoint -q "$c/run" || mount -t tmpfs -o mode=755 tmpfs "$c/run"
  cp /etc/hosts "$c/etc/hosts"
  mkdir -p "$c$STACK_DIR"
  [[ $c$STACK_DIR -ef $STACK_DIR ]] || mount --bind "$STACK_DIR" "$c$STACK_DIR"
}
# unmount_chroot DIR: everything mounted below DIR, deepest first. Nothing may ever delete a
# chroot with /dev or STACK_DIR still mounted in it.
unmount_chroot() {
  local c=$1 m
  for m in $(findmnt -rn -o TARGET | grep -E "^$c(/|$)" | sort -r); do umount -l "$m" 2>/dev/null || true; done
  ! findmnt -rn -o TARGET | grep -qE "^$c(/|$)"
}
chroot_built() { [[ $(cat "$CHROOT_BASE/$1/.binlog-relay-chroot" 2>/dev/null) == "${CHROOT_PKGS[$1]}" ]]; }
# ensure_chroots NAME...: build those of the chroots that are not built, side by side (each is
# mostly downloads and unpacking: two at once take little longer than one), then mount them all.
# A lock next to CHROOT_BASE keeps a second stack.sh (`up` while `chroots` builds, another clone)
# waiting until they are done instead of building over them.
ensure_chroots() {
  local name pids=() failed=0 i=0
  mkdir -p "$CHROOT_BASE" "$STACK_DIR"; chmod 755 "$STACK_DIR"
  exec 8>"${CHROOT_BASE%/}.lock"
  if ! flock -n 8; then
    log "chroots: waiting for another stack.sh building them (${CHROOT_BASE%/}.lock)"
    flock -w 1200 8 || die "could not lock ${CHROOT_BASE%/}.lock in 1200 s"
  fi
  for name in "$@"; do
    chroot_built "$name" && continue
    build_chroot "$name" & pids+=("$!:$name")
  done
  for i in "${pids[@]}"; do wait "${i%%:*}" || { log "chroot ${i#*:}: build failed (above)"; failed=1; }; done
  (( failed == 0 )) || die "building the chroots failed"
  for name in "$@"; do mount_chroot "$CHROOT_BASE/$name"; done
  flock -u 8; exec 8>&-
}
# build_chroot NAME: build CHROOT_BASE/NAME with its packages (a subshell of ensure_chroots: die
# ends only this build).
build_chroot() {
  local name=$1 c="$CHROOT_BASE/$1" pkgs=${CHROOT_PKGS[$1]} apt_o=(-o Acquire::Check-Valid-Until=false -o Acquire::Retries=3)
  local began=$SECONDS
  log "chroot $name: building $c (debootstrap --variant=minbase sid, then: $pkgs)"
  if [[ -d $c ]]; then unmount_chroot "$c" || die "cannot unmount what is mounted below $c"; rm -rf --one-file-system -- "$c"; fi
  debootstrap --variant=minbase sid "$c" "$DEBIAN_MIRROR" >/tmp/stack-debootstrap-"$name".log 2>&1 \
    || { tail -n 20 /tmp/stack-debootstrap-"$name".log >&2; die "debootstrap of $c failed"; }
  mount_chroot "$c"
  # No init system in a chroot: a policy that forbids starting services keeps the packages'
  # scripts from starting servers of their own.
  printf '#!/bin/sh\nexit 101\n' >"$c/usr/sbin/policy-rc.d"; chmod 755 "$c/usr/sbin/policy-rc.d"
  chroot "$c" apt-get "${apt_o[@]}" update -qq >/tmp/stack-apt-"$name".log 2>&1 \
    && DEBIAN_FRONTEND=noninteractive chroot "$c" apt-get "${apt_o[@]}" install -y -qq --no-install-recommends $pkgs \
      >>/tmp/stack-apt-"$name".log 2>&1 \
    || { tail -n 30 /tmp/stack-apt-"$name".log >&2; die "apt-get install in $c failed"; }
  chroot "$c" apt-get clean
  echo "$pkgs" >"$c/.binlog-relay-chroot"
  log "chroot $name: built in $((SECONDS - began)) s"
}

# ---------------------------------------------------------------- server helpers (of $FLAVOR)
dir_of() { echo "$STACK_DIR/${SUBDIR[$FLAVOR]}$1"; }
# Admin access goes through the unix socket as root (exists right after initialising);
# --no-defaults keeps /etc/mysql and ~/.my.cnf out of the picture.
sql() {
  local n=$1; shift
  if is_mysql; then in_root mysql --no-defaults -uroot -S "$(dir_of "$n")/mysqld.sock" -N -B "$@"
  else in_root mariadb --no-defaults -uroot -S "$(dir_of "$n")/mysqld.sock" -N -B "$@"; fi
}
is_up() { sql "$1" -e 'SELECT 1' >/dev/null 2>&1; }
slave_field() { sql "$1" --column-names -E -e "$(replica_status_sql)" 2>/dev/null | sed -n "s/^ *$2: *//p"; }
version_of() { sql "$1" -e 'SELECT VERSION()' 2>/dev/null; }

# pid_of NAME: pid of the live server started with this instance's cnf. Pid file first (and
# checked against pid reuse), else scan /proc: the pid file may be gone while the server lives.
pid_of() {
  local want p d cmd; d=$(dir_of "$1"); want=" --defaults-file=$d/my.cnf "
  for p in "$(cat "$d/mysqld.pid" 2>/dev/null)" /proc/[0-9]*; do
    p=${p#/proc/}
    [[ -n $p ]] || continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")
    # by path or by name (older stacks started mariadbd from PATH)
    [[ $cmd == *"$(basename "$(server_bin)")$want" && $cmd != *" "*"$want" ]] && { echo "$p"; return 0; }
  done
  return 1
}
alive() { local s; [[ -r /proc/$1/stat ]] && read -r _ _ s _ <"/proc/$1/stat" && [[ $s != Z ]]; }

write_cnf() {
  local n=$1 d; d=$(dir_of "$1")
  {
    cat <<CNF
# Generated by scripts/stack.sh on every start; edits are overwritten. Read via --defaults-file
# only, so nothing from /etc/mysql leaks in.
[mysqld]
user                           = mysql
datadir                        = $d/data
socket                         = $d/mysqld.sock
pid_file                       = $d/mysqld.pid
log_error                      = $d/error.log
port                           = $(port_of "$n")
bind_address                   = 127.0.0.1
server_id                      = ${SERVER_ID[$n]}
skip_name_resolve
log_bin                        = $d/data/binlog
relay_log                      = $d/data/relay-bin
binlog_row_image               = FULL
binlog_row_metadata            = FULL
binlog_checksum                = CRC32
# binlogs older than 30 minutes go at the next rotation: with the data in memory, test and bench
# runs would otherwise pile up gigabytes (stack.sh up sets it on running servers too)
binlog_expire_logs_seconds     = $BINLOG_EXPIRE
max_binlog_size                = 64M
max_allowed_packet             = 256M
character_set_server           = utf8mb4
collation_server               = utf8mb4_bin
max_connections                = 500
performance_schema             = OFF
# Test stack: speed over durability. A killed server loses nothing (the OS still has the
# writes); only an OS crash would, and then we rebuild the stack anyway.
innodb_flush_log_at_trx_commit = 2
sync_binlog                    = 0
# Seven servers a flavour share a small box: keep the other buffers small.
key_buffer_size                = 8M
innodb_log_buffer_size         = 16M
table_open_cache               = 1000
CNF
    if is_mysql; then
      cat <<CNF
# MySQL: GTIDs on, replicas log what they apply (the relay reads a replica's binlog).
gtid_mode                      = ON
enforce_gtid_consistency       = ON
log_replica_updates            = ON
replica_max_allowed_packet     = 1G
# notice a dead primary quickly (heartbeat = half of this)
replica_net_timeout            = 10
# MySQL's defaults, written out: a multi-threaded applier that commits in the primary's order.
replica_parallel_workers       = 4
replica_preserve_commit_order  = ON
# no X protocol: seven servers would fight over its port 33060
mysqlx                         = OFF
CNF
    else
      cat <<CNF
log_slave_updates              = ON
gtid_strict_mode               = ON
gtid_domain_id                 = 0
slave_max_allowed_packet       = 1G
# commit order on replicas = primary order (the relay reads replica binlogs)
slave_parallel_threads         = 0
# notice a dead primary quickly (heartbeat = half of this)
slave_net_timeout              = 10
aria_pagecache_buffer_size     = 8M
CNF
    fi
    local redo=innodb_log_file_size; is_mysql && redo=innodb_redo_log_capacity
    if [[ $n == misconf ]]; then
      # Deliberately wrong for the relay's start-up checks; otherwise like the others.
      printf '%-30s = %s\n' binlog_format STATEMENT innodb_buffer_pool_size 64M $redo 48M
      # MySQL: no RSA key pair, so caching_sha2_password cannot take a password without TLS on a
      # login it has not cached (the relay must say so, not crash; root has no password).
      # (An if, not `is_mysql && ...`: as the group's last command that would fail the function on
      # MariaDB, and set -e would end the script.)
      if is_mysql; then
        printf '%-30s = %s\n' caching_sha2_password_private_key_path /nonexistent/private_key.pem \
          caching_sha2_password_public_key_path /nonexistent/public_key.pem
      fi
    elif [[ $n == switch* ]]; then
      # Small test traffic only.
      printf '%-30s = %s\n' binlog_format ROW innodb_buffer_pool_size 64M $redo 48M
    else
      printf '%-30s = %s\n' binlog_format ROW innodb_buffer_pool_size 256M $redo 256M
    fi
  } >"$d/my.cnf"
}

# own DIR: the server's user (the flavour's own mysql user, whose uid differs in a chroot).
own() { in_root chown -R mysql:mysql "$1"; }

# init_instance NAME: create the datadir (once; marker-guarded so an interrupted install is redone
# from scratch). MySQL initialises one template without a binlog and copies it: seven
# `mysqld --initialize` would take a minute on two cores. The copy's auto.cnf goes, so each server
# makes a server_uuid of its own.
init_instance() {
  local n=$1 d; d=$(dir_of "$1")
  [[ -f $d/.installed ]] && return 0
  log "$FLAVOR $n: initialising $d/data"
  rm -rf "$d/data" "$d/.bootstrapped"; mkdir -p "$d"
  write_cnf "$n"; own "$d"
  if is_mysql; then
    local tpl; tpl="$STACK_DIR/${SUBDIR[$FLAVOR]}.template"
    if [[ ! -f $tpl.done ]]; then
      rm -rf "$tpl"; mkdir -p "$tpl"; own "$tpl"
      in_root /usr/sbin/mysqld --no-defaults --user=mysql --datadir="$tpl/data" --initialize-insecure \
          --skip-log-bin --log-error="$tpl/install.log" >/dev/null 2>&1 \
        || { tail -n 30 "$tpl/install.log" >&2; die "$FLAVOR: mysqld --initialize-insecure failed"; }
      touch "$tpl.done"
    fi
    cp -a "$tpl/data" "$d/data"; rm -f "$d/data/auto.cnf"
  else
    mkdir -p "$d/data"; own "$d"
    in_root mariadb-install-db --defaults-file="$d/my.cnf" --auth-root-authentication-method=normal \
        --skip-test-db >"$d/install.log" 2>&1 \
      || { tail -n 30 "$d/install.log" >&2; die "$FLAVOR $n: mariadb-install-db failed"; }
  fi
  touch "$d/.installed"; CHANGED=1
}

# daemon LOG CMD...: CMD in the background in a session of its own (a Ctrl-C or CI job teardown of
# the caller doesn't hit it), stdio to LOG, and no other file of the caller open: a server that
# inherited a caller's pipe or lock (our flock on fd 9, a CI runner's output, a test's lock file)
# would hold it for as long as it runs. $! is its pid.
daemon() {
  local log=$1; shift
  ( close_fds; exec setsid "$@" </dev/null >>"$log" 2>&1 ) &
}
# close_fds: close every file descriptor above 2 of this (sub)shell.
close_fds() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do fd=${fd##*/}; (( fd > 2 )) && eval "exec $fd>&-" 2>/dev/null; done
  return 0
}

# start_instance NAME: start the server in the background unless it already answers; wait <= 90 s.
start_instance() {
  local n=$1 d pid end c; d=$(dir_of "$1")
  is_up "$n" && return 0
  [[ -f $d/.installed ]] || die "$FLAVOR $n: not initialised (run: $0 up $FLAVOR)"
  # the server writes its error log as its own user (MySQL opens it after dropping root)
  write_cnf "$n"; touch "$d/error.log"; own "$d"
  log "$FLAVOR $n: starting $(server_bin) on 127.0.0.1:$(port_of "$n")"
  c=$(chroot_dir) || true
  daemon "$d/error.log" ${c:+chroot "$c"} "$(server_bin)" --defaults-file="$d/my.cnf"
  pid=$! end=$((SECONDS + 90))
  until is_up "$n"; do
    if ! { alive "$pid" || pid_of "$n" >/dev/null; } || (( SECONDS >= end )); then
      log "$FLAVOR $n: server did not become ready; tail of $d/error.log:"
      tail -n 25 "$d/error.log" >&2; exit 1
    fi
    sleep 0.3
  done
  CHANGED=1
}

# bootstrap NAME: accounts on every server, not binlogged. Not binlogged on purpose: the
# primary's binlog then holds only test traffic (replicas start from an empty position = its very
# first event, with nothing to collide with), and replicas never write GTIDs of their own, which
# gtid_strict_mode would reject later. repl exists everywhere for failover. On MySQL, repl uses
# caching_sha2_password (the default, and the only password plugin MySQL 9 has left) over TCP
# without TLS: the replicas fetch the server's RSA key (GET_SOURCE_PUBLIC_KEY=1).
bootstrap() {
  local n=$1 d; d=$(dir_of "$1")
  [[ -f $d/.bootstrapped ]] && return 0
  if is_mysql; then
    sql "$n" -e "SET SESSION sql_log_bin=0;
      CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY '';
      GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
      CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY 'repl';
      GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';"
  else
    sql "$n" -e "SET SESSION sql_log_bin=0;
      CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
      GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
      CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1' IDENTIFIED BY 'repl';
      GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';"
  fi
  sql "$n" -h127.0.0.1 -P"$(port_of "$n")" --protocol=tcp -e "SELECT 1" >/dev/null 2>&1 \
    || die "$FLAVOR $n: root@127.0.0.1 cannot connect over TCP"
  touch "$d/.bootstrapped"
}

# show_threads REPLICA: its replication threads and last errors, on stderr.
show_threads() { sql "$1" --column-names -E -e "$(replica_status_sql)" | grep -E 'Running|Last_.*Err' >&2 || true; }

repl_ok() { [[ $(slave_field "$1" "$(io_field)")/$(slave_field "$1" "$(sql_field)") == Yes/Yes ]]; }

# ensure_replication REPLICA: configure if never configured, start if stopped, and wait for
# both threads (only when the primary is up: otherwise IO can only say "Connecting").
ensure_replication() {
  local n=$1 p; p=$(port_of primary)
  if [[ -z $(sql "$n" -e "$(replica_status_sql)") ]]; then
    CHANGED=1
    if is_mysql; then
      log "$FLAVOR $n: configuring replication from primary (SOURCE_AUTO_POSITION=1)"
      sql "$n" -e "CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT=$p,
        SOURCE_USER='repl', SOURCE_PASSWORD='repl', SOURCE_CONNECT_RETRY=1, SOURCE_AUTO_POSITION=1,
        GET_SOURCE_PUBLIC_KEY=1"
    else
      log "$FLAVOR $n: configuring replication from primary (MASTER_USE_GTID=slave_pos)"
      sql "$n" -e "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$p,
        MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos"
    fi
  fi
  repl_ok "$n" && return 0
  log "$FLAVOR $n: START REPLICA"; sql "$n" -e 'START REPLICA'; CHANGED=1
  is_up primary || { log "$FLAVOR $n: primary is down, not waiting for replication"; return 0; }
  wait_for 30 repl_ok "$n" || {
    show_threads "$n"
    die "$FLAVOR $n: replication threads not running after 30 s"; }
}

# applied REPLICA POS: wait up to 30 s for REPLICA to apply POS; prints 0 when it has.
applied() {
  if is_mysql; then sql "$1" -e "SELECT WAIT_FOR_EXECUTED_GTID_SET('$2', 30)"
  else sql "$1" -e "SELECT MASTER_GTID_WAIT('$2', 30)"; fi
}
applied_pos() { if is_mysql; then gtid_pos "$1"; else sql "$1" -e 'SELECT @@gtid_slave_pos'; fi; }
# gtid_pos NAME: what the server has logged, on one line (MySQL breaks gtid_executed after each
# UUID's comma, and the client's batch mode would print that newline as a literal \n).
gtid_pos() { sql "$1" -e "SELECT REPLACE(@@$(gtid_var), CHAR(10), '')"; }

# catch_up REPLICA POS: wait until REPLICA has applied POS. A replica left behind (a killed
# bench, a machine stopped mid-run) may have gigabytes to apply: wait as long as it makes
# progress (its position moves within each 30 s), and give up only when it stalls.
catch_up() {
  local r=$1 pos=$2 seen="" now
  while [[ $(applied "$r" "$pos") != 0 ]]; do
    now=$(applied_pos "$r")
    [[ $now != "$seen" ]] || {
      show_threads "$r"
      die "$FLAVOR $r: did not reach $pos; stuck at $now for 30 s"; }
    log "$FLAVOR $r: catching up with the primary: at $now, target $pos"
    seen=$now
  done
}

# verify_replication: end-to-end proof that a row written on the primary reaches each replica.
verify_replication() {
  local token="ok-$$-$RANDOM" pos r
  log "$FLAVOR: verifying replication end to end"
  sql primary -e "CREATE DATABASE IF NOT EXISTS stack_check;
    CREATE TABLE IF NOT EXISTS stack_check.t (id INT AUTO_INCREMENT PRIMARY KEY, token VARCHAR(64));
    INSERT INTO stack_check.t (token) VALUES ('$token');"
  pos=$(gtid_pos primary)
  for r in "${REPLICAS[@]}"; do
    catch_up "$r" "$pos"
    [[ $(sql "$r" -e "SELECT COUNT(*) FROM stack_check.t WHERE token='$token'") == 1 ]] \
      || die "$FLAVOR $r: reached $pos but the check row is missing"
  done
  # Drop it again and wait, so tests start from a quiet, in-sync stack.
  sql primary -e 'DROP DATABASE stack_check'; pos=$(gtid_pos primary)
  for r in "${REPLICAS[@]}"; do catch_up "$r" "$pos"; done
  log "$FLAVOR: replication ok: primary -> ${REPLICAS[*]} at gtid $pos"
}

stop_instance() {
  local n=$1 pid end
  pid=$(pid_of "$n") || { log "$FLAVOR $n: not running"; return 0; }
  log "$FLAVOR $n: stopping (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  end=$((SECONDS + 60))
  while alive "$pid"; do
    if (( SECONDS >= end )); then log "$FLAVOR $n: still alive after 60 s, SIGKILL"; kill -KILL "$pid"; fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------- Redis / RabbitMQ
redis_up() { [[ $(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null) == PONG ]]; }
ensure_redis() {
  redis_up && { log "redis: already answering on 127.0.0.1:6379"; return 0; }
  local d="$STACK_DIR/redis"; mkdir -p "$d"
  log "redis: starting redis-server on 127.0.0.1:6379"
  ( close_fds; exec redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir "$d" --logfile "$d/redis.log" --pidfile "$d/redis.pid" </dev/null >/dev/null 2>&1 )
  wait_for 30 redis_up || { tail -n 20 "$d/redis.log" >&2; die "redis did not answer PONG"; }
}

# ---------------------------------------------------------------- Redis Sentinel and Cluster
# Two Redis topologies of the stack's own, for test/integration/redis_topology_test.go, which kills
# their nodes (the machine's Redis on 6379 is never touched): a Sentinel group, master name
# relay-sentinel, data nodes 6390-6392 (6390 the master when the group starts from nothing) and
# Sentinels 26390-26392 with a quorum of 2; and a Redis Cluster of three masters with one replica
# each on 7000-7005. No persistence (--save "" --appendonly no), data in STACK_DIR/redis-topology.
# Who is master survives a node's restart: the Sentinels rewrite their own files, and a Cluster
# node keeps nodes-PORT.conf; so a node started again rejoins as a replica of whoever leads now.
RTOPO_MASTER=relay-sentinel
RTOPO_DATA=(6390 6391 6392)
RTOPO_SENTINELS=(26390 26391 26392)
RTOPO_CLUSTER=(7000 7001 7002 7003 7004 7005)
rtopo_dir() { echo "$STACK_DIR/redis-topology"; }
rping() { [[ $(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]; }
rcli() { local p=$1; shift; redis-cli -h 127.0.0.1 -p "$p" "$@" 2>/dev/null | tr -d '\r'; }
# rtopo_daemon PORT ARGS...: redis-server ARGS daemonized on 127.0.0.1:PORT, logging beside its data.
# Each data node has its own dump file: a replica's full sync goes through one, even with no saves.
rtopo_daemon() {
  local port=$1 d; shift; d=$(rtopo_dir)
  ( close_fds; exec redis-server "$@" --daemonize yes --bind 127.0.0.1 --port "$port" --dir "$d" \
      --logfile "$d/$port.log" --pidfile "$d/$port.pid" </dev/null >/dev/null 2>&1 )
}
all_ping() { local p; for p in "$@"; do rping "$p" || return 1; done; }
# none_running PORT...: no server of these ports runs (answering or not: one shutting down still
# holds its port); their pid files tell, which Redis deletes on its way out.
none_running() {
  local p pid
  for p in "$@"; do
    pid=$(cat "$(rtopo_dir)/$p.pid" 2>/dev/null) || continue
    kill -0 "$pid" 2>/dev/null && return 1
  done
  return 0
}

# rtopo_master: the port the Sentinels name as master, 6390 when none answers.
rtopo_master() {
  local p m
  for p in "${RTOPO_SENTINELS[@]}"; do
    m=$(rcli "$p" sentinel get-master-addr-by-name "$RTOPO_MASTER" | sed -n 2p)
    [[ -n $m ]] && { echo "$m"; return; }
  done
  echo "${RTOPO_DATA[0]}"
}
# sentinel_healthy: the master has both replicas linked and every Sentinel names it, with the
# quorum reachable.
sentinel_healthy() {
  local m p; m=$(rtopo_master)
  [[ $(rcli "$m" role | head -n1) == master ]] || return 1
  [[ $(rcli "$m" info replication | grep -c '^slave[0-9]*:.*state=online') == 2 ]] || return 1
  for p in "${RTOPO_SENTINELS[@]}"; do
    [[ $(rcli "$p" sentinel get-master-addr-by-name "$RTOPO_MASTER" | sed -n 2p) == "$m" ]] || return 1
    [[ $(rcli "$p" sentinel ckquorum "$RTOPO_MASTER") == OK* ]] || return 1
    [[ $(rcli "$p" sentinel master "$RTOPO_MASTER" | sed -n '/^num-slaves$/{n;p}') == 2 ]] || return 1
  done
}
ensure_redis_sentinel() {
  local d p m; d=$(rtopo_dir); mkdir -p "$d"
  if all_ping "${RTOPO_DATA[@]}" "${RTOPO_SENTINELS[@]}" && sentinel_healthy; then
    log "redis sentinel: already up (master 127.0.0.1:$(rtopo_master))"; return 0
  fi
  # The Sentinels first: their files say who leads, so a data node started afterwards follows it.
  for p in "${RTOPO_SENTINELS[@]}"; do
    rping "$p" && continue
    [[ -s $d/sentinel-$p.conf ]] || cat >"$d/sentinel-$p.conf" <<CONF
# Generated by scripts/stack.sh; Sentinel rewrites it (known replicas, Sentinels, the current master).
sentinel resolve-hostnames no
sentinel monitor $RTOPO_MASTER 127.0.0.1 ${RTOPO_DATA[0]} 2
sentinel down-after-milliseconds $RTOPO_MASTER 1000
sentinel failover-timeout $RTOPO_MASTER 5000
sentinel parallel-syncs $RTOPO_MASTER 2
CONF
    log "redis sentinel: starting a Sentinel on 127.0.0.1:$p"
    rtopo_daemon "$p" "$d/sentinel-$p.conf" --sentinel
  done
  wait_for 15 all_ping "${RTOPO_SENTINELS[@]}" || { tail -n 20 "$d/${RTOPO_SENTINELS[0]}.log" >&2; die "redis sentinel: the Sentinels did not answer"; }
  m=$(rtopo_master)
  for p in "${RTOPO_DATA[@]}"; do
    rping "$p" && continue
    if [[ $p == "$m" ]]; then
      log "redis sentinel: starting the master on 127.0.0.1:$p"
      rtopo_daemon "$p" --save "" --appendonly no --dbfilename "dump-$p.rdb"
    else
      log "redis sentinel: starting a replica of 127.0.0.1:$m on 127.0.0.1:$p"
      rtopo_daemon "$p" --save "" --appendonly no --dbfilename "dump-$p.rdb" --replicaof 127.0.0.1 "$m"
    fi
  done
  wait_for 30 sentinel_healthy || die "redis sentinel: not healthy after 30 s (master $(rtopo_master); logs in $d)"
  log "redis sentinel: master 127.0.0.1:$(rtopo_master), two replicas, three Sentinels"
}

# cluster_healthy: every node sees six nodes, three masters and three replicas, none failing,
# and the slots all served.
cluster_healthy() {
  local p n
  for p in "${RTOPO_CLUSTER[@]}"; do
    [[ $(rcli "$p" cluster info | sed -n 's/^cluster_state://p') == ok ]] || return 1
    n=$(rcli "$p" cluster nodes)
    [[ $(grep -c . <<<"$n") == 6 && $(grep -c ' master ' <<<"${n//,/ }") == 3 ]] || return 1
    grep -q fail <<<"$n" && return 1
  done
  return 0
}
ensure_redis_cluster() {
  local d p addrs=(); d=$(rtopo_dir); mkdir -p "$d"
  if all_ping "${RTOPO_CLUSTER[@]}" && cluster_healthy; then log "redis cluster: already up (7000-7005)"; return 0; fi
  for p in "${RTOPO_CLUSTER[@]}"; do
    addrs+=("127.0.0.1:$p")
    rping "$p" && continue
    log "redis cluster: starting the node on 127.0.0.1:$p"
    rtopo_daemon "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 1000 \
      --save "" --appendonly no --dbfilename "dump-$p.rdb"
  done
  wait_for 15 all_ping "${RTOPO_CLUSTER[@]}" || die "redis cluster: the nodes did not answer (logs in $d)"
  if [[ $(rcli "${RTOPO_CLUSTER[0]}" cluster info | sed -n 's/^cluster_known_nodes://p') == 1 ]]; then
    log "redis cluster: creating it (three masters, one replica each)"
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$d/create.log" 2>&1 \
      || { tail -n 20 "$d/create.log" >&2; die "redis cluster: create failed"; }
  fi
  wait_for 30 cluster_healthy || die "redis cluster: not healthy after 30 s ($0 down --wipe starts it afresh; logs in $d)"
  log "redis cluster: three masters with a replica each on 7000-7005"
}
ensure_redis_topologies() { ensure_redis_sentinel; ensure_redis_cluster; }

stop_redis_topologies() {
  local p
  for p in "${RTOPO_SENTINELS[@]}" "${RTOPO_DATA[@]}" "${RTOPO_CLUSTER[@]}"; do
    rping "$p" || continue
    redis-cli -h 127.0.0.1 -p "$p" shutdown nosave >/dev/null 2>&1 || true   # a Sentinel takes no NOSAVE
    redis-cli -h 127.0.0.1 -p "$p" shutdown >/dev/null 2>&1 || true
  done
  wait_for 15 none_running "${RTOPO_SENTINELS[@]}" "${RTOPO_DATA[@]}" "${RTOPO_CLUSTER[@]}" \
    || log "redis sentinel and cluster: some nodes still answer after 15 s"
  log "redis sentinel and cluster: stopped"
}

status_redis_topologies() {
  local m ok=0 n
  if all_ping "${RTOPO_DATA[@]}" "${RTOPO_SENTINELS[@]}" && sentinel_healthy; then
    m=$(rtopo_master)
    echo "redis-sentinel up    127.0.0.1:26390-26392  master $RTOPO_MASTER at 127.0.0.1:$m, 2 replicas online, quorum ok"
  else
    echo "redis-sentinel down  127.0.0.1:26390-26392  (or not healthy; data nodes 6390-6392)"; ok=1
  fi
  if all_ping "${RTOPO_CLUSTER[@]}" && cluster_healthy; then
    n=$(rcli "${RTOPO_CLUSTER[0]}" cluster nodes | awk '$3 ~ /master/ {sub(/@.*/, "", $2); sub(/.*:/, "", $2); printf "%s ", $2}')
    echo "redis-cluster  up    127.0.0.1:7000-7005  state ok, masters ${n% }"
  else echo "redis-cluster  down  127.0.0.1:7000-7005"; ok=1; fi
  return $ok
}

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
# amqp_up [PORT]: send the AMQP 0-9-1 protocol header; a broker answers with a method frame (type 1).
amqp_up() {
  [[ $(timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/${1:-5672} && printf 'AMQP\0\0\x09\x01' >&3 &&
       head -c1 <&3" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 01 ]]
}
# Kicked off early and awaited at the end, so the broker boots while the databases initialise.
start_rabbit() {
  amqp_up && return 0
  log "rabbitmq: starting rabbitmq-server -detached"
  ( close_fds; exec rabbitmq-server -detached </dev/null >/dev/null 2>&1 ) || true  # may already be booting
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
  # Plugins are enabled online, never restarting the broker, in one CLI call (each call costs the
  # CLI's start-up: seconds, minutes on a machine busy compiling). The management UI is optional
  # (nothing depends on it); the consistent-hash exchange ships with the broker, and per-key order
  # end to end uses it (docs/ordering.md), as do its tests. The port and the enabled_plugins file
  # are looked at, not the CLI; enabling a plugin that is on already changes nothing.
  local want=()
  [[ ${STACK_RABBIT_MGMT:-1} == 1 ]] && ! port_open 15672 && want+=(rabbitmq_management)
  grep -qs rabbitmq_consistent_hash_exchange /etc/rabbitmq/enabled_plugins || want+=(rabbitmq_consistent_hash_exchange)
  if (( ${#want[@]} )) && ! rabbitmq-plugins -q enable --online "${want[@]}" >/dev/null 2>&1; then
    log "rabbitmq: WARNING: could not enable ${want[*]} (the management UI is optional; the per-key ordering tests need rabbitmq_consistent_hash_exchange)"
  elif (( ${#want[@]} )); then
    log "rabbitmq: enabled ${want[*]}"
  fi
  ensure_stream_plugin 5552 rabbitmqctl rabbitmq-plugins
}

# stream_on_loopback PORT: the stream protocol listens on 127.0.0.1:PORT and on no other address.
stream_on_loopback() {
  port_open "$1" || return 1
  command -v ss >/dev/null || return 0
  [[ $(ss -Hltn "sport = :$1" 2>/dev/null | awk '{print $4}' | sort -u | tr '\n' ' ') == "127.0.0.1:$1 " ]]
}
# ensure_stream_plugin PORT CTL PLUGINS: the stream plugin (internal/streamlane and its tests) on
# 127.0.0.1:PORT, enabled online, never restarting the broker. Its listener is put in the node's
# environment first, persistent so that loading the plugin keeps it (a node started without it in
# its config would listen on every interface); a listener already up elsewhere is moved by
# disabling and enabling the plugin. The advertised host is set too, though the lane dials the
# configured host:port whatever the broker advertises (its address resolver).
ensure_stream_plugin() {
  local port=$1 ctl=$2 plugins=$3
  stream_on_loopback "$port" && return 0
  $ctl -q eval "[application:set_env(rabbitmq_stream, K, V, [{persistent, true}]) || {K, V} <-
    [{tcp_listeners, [{\"127.0.0.1\", $port}]}, {advertised_host, <<\"127.0.0.1\">>}, {advertised_port, $port}]]." \
    >/dev/null 2>&1 || log "rabbitmq $port: note: could not set the stream listener in the node's environment"
  port_open "$port" && $plugins -q disable --online rabbitmq_stream >/dev/null 2>&1
  if $plugins -q enable --online rabbitmq_stream >/dev/null 2>&1 && wait_for 30 stream_on_loopback "$port"; then
    log "rabbitmq: stream plugin enabled (127.0.0.1:$port)"
  else log "rabbitmq: WARNING: no stream protocol on 127.0.0.1:$port only (the stream lane tests need it)"; fi
}

# RabbitMQ 4.3 runs from the mysql chroot as its own node (rabbit4@localhost) on its own AMQP,
# distribution and management ports, with its data in STACK_DIR/rabbitmq-4.3. It registers with
# whichever epmd answers on 4369 (the machine's broker starts one; epmd's protocol is stable).
# Its plugins are enabled by file before it boots, so no restart is ever needed.
RABBIT4_DIR() { echo "$STACK_DIR/rabbitmq-4.3"; }
rabbit4_env() {
  local d; d=$(RABBIT4_DIR)
  echo env HOME="$d" RABBITMQ_NODENAME=$RABBIT4_NODE RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=5673 \
    RABBITMQ_DIST_PORT=$RABBIT4_DIST_PORT RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    RABBITMQ_PID_FILE="$d/rabbit.pid" RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config"
}
rabbit4ctl() { chroot "$CHROOT_BASE/mysql" $(rabbit4_env) rabbitmqctl -n $RABBIT4_NODE "$@"; }
rabbit4plugins() { chroot "$CHROOT_BASE/mysql" $(rabbit4_env) rabbitmq-plugins -n $RABBIT4_NODE "$@"; }
start_rabbit4() {
  amqp_up 5673 && return 0
  local d; d=$(RABBIT4_DIR); mkdir -p "$d/log" "$d/mnesia"
  write_rabbit4_conf
  echo '[rabbitmq_management,rabbitmq_consistent_hash_exchange,rabbitmq_stream].' >"$d/enabled_plugins"
  echo '[].' >"$d/advanced.config"
  chroot "$CHROOT_BASE/mysql" chown -R rabbitmq:rabbitmq "$d"
  log "rabbitmq 4.3: starting node $RABBIT4_NODE on 127.0.0.1:5673"
  # The server runs as the chroot's rabbitmq user (the package's wrapper switches to it), with
  # its cookie in HOME=$d; rabbit4ctl uses the same HOME, so the CLI finds that cookie.
  daemon "$d/log/stdout.log" chroot "$CHROOT_BASE/mysql" $(rabbit4_env) rabbitmq-server
}
# The stream protocol on 127.0.0.1:5553, advertised as that address (rabbitmq_stream, enabled
# before boot; a node started before streams were added gets it online in ensure_rabbit4).
write_rabbit4_conf() {
  local d; d=$(RABBIT4_DIR)
  cat >"$d/rabbitmq.conf" <<CONF
# Generated by scripts/stack.sh. RabbitMQ 4.3 of the test stack, beside the machine's 3.10.
listeners.tcp.default = 127.0.0.1:5673
management.tcp.port = $RABBIT4_MGMT_PORT
management.tcp.ip = 127.0.0.1
loopback_users = none
default_user = guest
default_pass = guest
stream.listeners.tcp.1 = 127.0.0.1:5553
stream.advertised_host = 127.0.0.1
stream.advertised_port = 5553
CONF
}
ensure_rabbit4() {
  wait_for 120 amqp_up 5673 || { tail -n 30 "$(RABBIT4_DIR)/log/stdout.log" >&2; die "rabbitmq 4.3: no AMQP on 127.0.0.1:5673 after 120 s"; }
  log "rabbitmq 4.3: AMQP answering on 127.0.0.1:5673"
  if ! stream_on_loopback 5553; then
    write_rabbit4_conf   # for its next boot
    ensure_stream_plugin 5553 rabbit4ctl rabbit4plugins
  fi
}
stop_rabbit4() {
  amqp_up 5673 || return 0
  log "rabbitmq 4.3: stopping"
  rabbit4ctl stop >/dev/null 2>&1 || true
  wait_for 60 bash -c '! exec 3<>/dev/tcp/127.0.0.1/5673' || log "rabbitmq 4.3: still listening after 60 s"
}
rabbit_version() {
  if [[ $1 == 5672 ]]; then rabbitmqctl -q version 2>/dev/null; else rabbit4ctl -q version 2>/dev/null; fi
}

# ---------------------------------------------------------------- RabbitMQ cluster (on request)
# Three RabbitMQ 4.3 nodes of one cluster, for test/chaos's TestRabbitClusterNodeStopped (make
# chaos): rclu1@localhost, rclu2@localhost and rclu3@localhost from the mysql chroot, on AMQP
# 5681-5683, management 15681-15683 and distribution ports 25681-25683, data in
# STACK_DIR/rabbit-cluster/NODE, cluster name relay-test-cluster. rclu2 and rclu3 join rclu1. The
# three share one Erlang cookie: the package's wrappers run the servers and the CLI as the chroot's
# rabbitmq user, whose HOME (/var/lib/rabbitmq in the chroot) holds it, whatever HOME the caller
# sets. Booting three nodes costs CI time, so only `rabbit-cluster` starts them; `down` stops them.
RCLU_NODES=(rclu1 rclu2 rclu3)
declare -A RCLU_AMQP=([rclu1]=5681 [rclu2]=5682 [rclu3]=5683)
rclu_dir() { echo "$STACK_DIR/rabbit-cluster/$1"; }
rclu_env() {
  local n=$1 d p=${RCLU_AMQP[$1]}; d=$(rclu_dir "$1")
  echo env RABBITMQ_NODENAME="$n@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$p" \
    RABBITMQ_DIST_PORT=$((p + 20000)) RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    RABBITMQ_PID_FILE="$d/rabbit.pid" RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config"
}
# rclu_ctl NODE ARGS...: rabbitmqctl of that node.
rclu_ctl() { local n=$1; shift; chroot "$CHROOT_BASE/mysql" $(rclu_env "$n") rabbitmqctl -q -n "$n@localhost" "$@"; }
# rclu_vm NODE: the node's Erlang VM runs (after stop_app it does, with AMQP closed).
rclu_vm() { local p; p=$(cat "$(rclu_dir "$1")/rabbit.pid" 2>/dev/null) && [[ -n $p ]] && alive "$p"; }
# rclu_running: rclu1 sees all three nodes running in its cluster.
rclu_running() { [[ $(rclu_nodes running_nodes) == "rclu1@localhost rclu2@localhost rclu3@localhost" ]]; }
# rclu_member NODE: rclu1's cluster counts NODE as a member (running or not).
rclu_member() { [[ " $(rclu_nodes disk_nodes) " == *" $1@localhost "* ]]; }
# rclu_nodes KEY: the nodes rclu1's cluster_status lists under KEY (running_nodes, disk_nodes), sorted.
rclu_nodes() {
  rclu_ctl rclu1 cluster_status --formatter json 2>/dev/null \
    | /usr/bin/python3 -c 'import json, sys; print(" ".join(sorted(json.load(sys.stdin).get(sys.argv[1]) or [])))' "$1" 2>/dev/null
}
write_rclu_conf() {
  local n=$1 d p=${RCLU_AMQP[$1]}; d=$(rclu_dir "$1")
  cat >"$d/rabbitmq.conf" <<CONF
# Generated by scripts/stack.sh: node $n of the test stack's three-node RabbitMQ cluster.
listeners.tcp.default = 127.0.0.1:$p
management.tcp.port = $((p + 10000))
management.tcp.ip = 127.0.0.1
loopback_users = none
default_user = guest
default_pass = guest
cluster_name = relay-test-cluster
CONF
  echo '[rabbitmq_management].' >"$d/enabled_plugins"
  # Distribution on loopback only (by default it listens on every interface).
  echo '[{kernel, [{inet_dist_use_interface, {127,0,0,1}}]}].' >"$d/advanced.config"
}
# start_rclu_node NODE: boot its VM in the background, or start the app of a VM left stopped.
start_rclu_node() {
  local n=$1 d; d=$(rclu_dir "$1")
  amqp_up "${RCLU_AMQP[$n]}" && return 0
  if rclu_vm "$n"; then
    log "rabbit-cluster: $n@localhost runs with its app stopped; start_app"
    rclu_ctl "$n" start_app >/dev/null 2>&1 || log "rabbit-cluster: note: start_app on $n@localhost failed (waiting for AMQP anyway)"
    return 0
  fi
  mkdir -p "$d/log" "$d/mnesia"
  write_rclu_conf "$n"
  chroot "$CHROOT_BASE/mysql" chown -R rabbitmq:rabbitmq "$d"
  log "rabbit-cluster: starting node $n@localhost on 127.0.0.1:${RCLU_AMQP[$n]}"
  daemon "$d/log/stdout.log" chroot "$CHROOT_BASE/mysql" $(rclu_env "$n") rabbitmq-server
}
# join_rclu NODE: NODE joins rclu1's cluster unless it is a member already.
join_rclu() {
  local n=$1
  rclu_member "$n" && return 0
  log "rabbit-cluster: $n@localhost joins rclu1@localhost"
  rclu_ctl "$n" stop_app >/dev/null || die "rabbit-cluster: stop_app on $n@localhost failed"
  # A node that was in another cluster (rclu1's data wiped) must forget it first.
  if ! rclu_ctl "$n" join_cluster rclu1@localhost >/dev/null 2>&1; then
    log "rabbit-cluster: $n@localhost could not join as it is; resetting it"
    rclu_ctl "$n" reset >/dev/null && rclu_ctl "$n" join_cluster rclu1@localhost >/dev/null \
      || die "rabbit-cluster: $n@localhost cannot join rclu1@localhost"
  fi
  rclu_ctl "$n" start_app >/dev/null || die "rabbit-cluster: start_app on $n@localhost failed"
}
ensure_rabbit_cluster() {
  local began=$SECONDS n
  ensure_chroots mysql
  mkdir -p "$STACK_DIR/rabbit-cluster"
  if all_amqp_rclu && rclu_running; then log "rabbit-cluster: already up (rclu1-3@localhost on 5681-5683)"; return 0; fi
  for n in "${RCLU_NODES[@]}"; do start_rclu_node "$n"; done
  for n in "${RCLU_NODES[@]}"; do
    wait_for 180 amqp_up "${RCLU_AMQP[$n]}" \
      || { tail -n 30 "$(rclu_dir "$n")/log/stdout.log" >&2; die "rabbit-cluster: no AMQP on 127.0.0.1:${RCLU_AMQP[$n]} ($n@localhost) after 180 s"; }
  done
  for n in "${RCLU_NODES[@]:1}"; do join_rclu "$n"; done
  wait_for 120 rclu_running || die "rabbit-cluster: rclu1@localhost does not see three running nodes after 120 s ($(rclu_ctl rclu1 cluster_status 2>&1 | tr '\n' ' '))"
  wait_for 60 all_amqp_rclu || die "rabbit-cluster: a node's AMQP port is closed after joining"
  log "rabbit-cluster: three nodes running (rclu1-3@localhost, AMQP 5681-5683, management 15681-15683) in $((SECONDS - began)) s"
}
all_amqp_rclu() { local n; for n in "${RCLU_NODES[@]}"; do amqp_up "${RCLU_AMQP[$n]}" || return 1; done; }
stop_rabbit_cluster() {
  local n any=0
  [[ -d $CHROOT_BASE/mysql/usr ]] || return 0
  for n in "${RCLU_NODES[@]}"; do
    rclu_vm "$n" || continue
    any=1; log "rabbit-cluster: stopping $n@localhost"
    rclu_ctl "$n" stop >/dev/null 2>&1 || true
  done
  (( any )) || return 0
  for n in "${RCLU_NODES[@]}"; do
    wait_for 60 bash -c "! kill -0 \$(cat '$(rclu_dir "$n")/rabbit.pid' 2>/dev/null) 2>/dev/null" || log "rabbit-cluster: $n@localhost still running after 60 s"
  done
}
# rabbit-cluster-ctl NODE ARGS: rabbitmqctl of one node (rclu1, rclu2, rclu3, or NODE@localhost).
cmd_rabbit_cluster_ctl() {
  local n=${1:-}; n=${n%@localhost}
  [[ -n $n && -v RCLU_AMQP[$n] ]] || die "usage: $0 rabbit-cluster-ctl rclu1|rclu2|rclu3 ARGS..."
  shift; mount_chroot "$CHROOT_BASE/mysql"; rclu_ctl "$n" "$@"
}
status_rabbit_cluster() {
  local n up=() v
  [[ -d $CHROOT_BASE/mysql/usr ]] || { echo "rabbit-cluster not built (needs the mysql chroot: $0 up mysql-9.7)"; return 0; }
  for n in "${RCLU_NODES[@]}"; do amqp_up "${RCLU_AMQP[$n]}" && up+=("$n"); done
  if (( ${#up[@]} == 0 )); then echo "rabbit-cluster not started (on request: $0 rabbit-cluster)"; return 0; fi
  v=$(rclu_ctl "${up[0]}" version 2>/dev/null)
  if (( ${#up[@]} == 3 )) && rclu_running; then
    echo "rabbit-cluster up    127.0.0.1:5681-5683  $v  nodes rclu1 rclu2 rclu3 running, management 15681-15683"
  else
    echo "rabbit-cluster part  127.0.0.1:5681-5683  $v  AMQP answering on: ${up[*]} (of rclu1 rclu2 rclu3)"
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

# up_flavor FLAVOR: the flavour's seven servers, initialised, started and replicating.
up_flavor() {
  local n r; set_flavor "$1"; CHANGED=0
  [[ -n ${SUBDIR[$FLAVOR]} ]] && { mkdir -p "$STACK_DIR/${SUBDIR[$FLAVOR]}"; chmod 755 "$STACK_DIR/${SUBDIR[$FLAVOR]}"; }
  for n in "${NAMES[@]}"; do
    init_instance "$n"; start_instance "$n"; bootstrap "$n"
    sql "$n" -e "SET GLOBAL binlog_expire_logs_seconds = $BINLOG_EXPIRE"   # servers started by an older cnf
  done
  for r in "${REPLICAS[@]}"; do ensure_replication "$r"; done
  if (( CHANGED )); then verify_replication; else log "$FLAVOR: all seven already up, replication running"; fi
}

cmd_up() {
  local f want=("$@") rabbit4=0
  (( ${#want[@]} )) || want=("${FLAVORS[@]}")
  for f in "${want[@]}"; do set_flavor "$f"; [[ $f == mariadb-10.11 ]] || rabbit4=1; done
  ensure_packages
  # The chroots first, under their own lock: a stack.sh start|stop|redis-topologies of a test
  # running meanwhile (make test's MariaDB lane runs while the other lane's `up` waits for them)
  # need not wait for minutes of building.
  local roots=(); for f in "${want[@]}"; do [[ -z ${CHROOT_OF[$f]} ]] || roots+=("${CHROOT_OF[$f]}"); done
  (( rabbit4 )) && roots+=(mysql)
  (( ${#roots[@]} == 0 )) || ensure_chroots $(printf '%s\n' "${roots[@]}" | sort -u)
  lock; touch "$STACK_DIR/$MARKER"
  start_rabbit
  if (( rabbit4 )); then start_rabbit4; fi
  for f in "${want[@]}"; do up_flavor "$f"; done
  if [[ $STACK_DIR == /dev/shm/* ]]; then
    local avail; avail=$(shm_free_kib)
    (( ${avail:-0} >= SHM_MIN_FREE_GIB * 1024 * 1024 )) || log "WARNING: /dev/shm has $(( ${avail:-0} / 1024 )) MiB free," \
      "under ${SHM_MIN_FREE_GIB} GiB; the running stack stays there. Purge binary logs or: $0 down --wipe && $0 up"
  fi
  ensure_redis
  # A test that fails over the Sentinel group or the Cluster holds this file lock
  # (testenv.LockRedisTopologies): what it stopped on purpose is not to be restarted under it.
  # Such a test calls `stack.sh redis-topologies`, which takes the stack lock: that one is let go
  # while this waits, and taken again after, in the test's order (topologies, then stack).
  exec 7>"${TMPDIR:-/tmp}/binlog-relay-shared-redis-topologies.lock"
  if ! flock -n 7; then
    log "redis-topologies: waiting for a test that holds them"
    flock -u 9
    flock -w 900 7 || die "a test held the Redis topologies for 900 s"
    lock
  fi
  ensure_redis_topologies; exec 7>&-
  ensure_rabbit
  (( rabbit4 )) && ensure_rabbit4
  log "stack up in ${SECONDS}s (STACK_DIR=$STACK_DIR; flavours: ${want[*]})"
}

cmd_down() {
  [[ ${1:-} == "" || $1 == --wipe ]] || die "usage: $0 down [--wipe]"
  [[ -d $STACK_DIR ]] || { log "nothing to do: $STACK_DIR does not exist"; return 0; }
  [[ ${1:-} != --wipe || ( -f $STACK_DIR/$MARKER && $STACK_DIR != / ) ]] \
    || die "refusing to wipe $STACK_DIR: no $MARKER marker (not created by '$0 up')"
  lock
  local f n c
  for f in "${FLAVORS[@]}"; do
    set_flavor "$f"
    c=$(chroot_dir) || true
    [[ -z $c || -d $c/usr ]] || continue
    for n in "${NAMES[@]}"; do stop_instance "$n"; done
  done
  [[ -d $CHROOT_BASE/mysql/usr ]] && stop_rabbit4
  stop_rabbit_cluster
  stop_redis_topologies
  # Nothing runs in the chroots now: unmount their proc, dev (the host's /dev,
  # bound recursively), run and STACK_DIR, so that deleting the chroot cache
  # afterwards cannot reach the host's /dev or the stack's data. up mounts
  # them again.
  for c in "$CHROOT_BASE"/*; do
    [[ -d $c ]] || continue
    unmount_chroot "$c" || die "cannot unmount what is mounted below $c"
  done
  if [[ ${1:-} == --wipe ]]; then
    log "wiping $STACK_DIR"; rm -rf --one-file-system -- "$STACK_DIR"
  fi
  log "down (redis and rabbitmq 3.10 left running: they belong to the machine)"
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

# status_flavor FLAVOR: one line per server; returns 1 when one is unhealthy.
status_flavor() {
  local n ok=0 line io sq err gtid
  set_flavor "$1"
  for n in "${NAMES[@]}"; do
    if ! is_up "$n"; then printf '%-14s %-9s down  127.0.0.1:%s\n' "$FLAVOR" "$n" "$(port_of "$n")"; ok=1; continue; fi
    gtid=$(gtid_pos "$n")
    line=$(printf '%-14s %-9s up    127.0.0.1:%s  %s  gtid=%s' "$FLAVOR" "$n" "$(port_of "$n")" "$(version_of "$n")" "${gtid:-none}")
    if [[ $n == replica* ]]; then
      io=$(slave_field "$n" "$(io_field)"); sq=$(slave_field "$n" "$(sql_field)")
      line+="  io=${io:-none} sql=${sq:-none} lag=$(slave_field "$n" "$(lag_field)")"
      err=$(slave_field "$n" Last_IO_Error)$(slave_field "$n" Last_SQL_Error)
      [[ -n $err ]] && line+="  error=\"$err\""
      [[ $io/$sq == Yes/Yes ]] || ok=1
    elif [[ $n == misconf ]]; then line+="  binlog_format=$(sql "$n" -e 'SELECT @@binlog_format')"
    elif [[ $n == switch* && -n $(sql "$n" -e "$(replica_status_sql)") ]]; then
      line+="  io=$(slave_field "$n" "$(io_field)") sql=$(slave_field "$n" "$(sql_field)") (set up by tests)"
    fi
    space_of "$n"; echo "$line$SPACE_LINE"
  done
  return $ok
}

cmd_status() {
  local f ok=0 c
  for f in "${FLAVORS[@]}"; do
    set_flavor "$f"; c=$(chroot_dir) || true
    if [[ -n $c && ! -d $c/usr ]]; then printf '%-14s not built (%s up %s builds its chroot %s)\n' "$f" "$0" "$f" "$c"; ok=1; continue; fi
    status_flavor "$f" || ok=1
  done
  space_total
  if redis_up; then echo "redis          up    127.0.0.1:6379  $(redis-cli -h 127.0.0.1 -p 6379 info server 2>/dev/null | sed -n 's/^redis_version:\([^\r]*\).*/\1/p')  PONG"
  else echo "redis          down  127.0.0.1:6379"; ok=1; fi
  status_redis_topologies || ok=1
  if amqp_up 5672; then echo "rabbitmq-3     up    127.0.0.1:5672  $(rabbit_version 5672)  AMQP"; else echo "rabbitmq-3     down  127.0.0.1:5672"; ok=1; fi
  if [[ ! -d $CHROOT_BASE/mysql/usr ]]; then echo "rabbitmq-4     not built"; ok=1
  elif amqp_up 5673; then echo "rabbitmq-4     up    127.0.0.1:5673  $(rabbit_version 5673)  AMQP  node $RABBIT4_NODE"
  else echo "rabbitmq-4     down  127.0.0.1:5673"; ok=1; fi
  status_rabbit_cluster
  return $ok
}

cmd_env() {
  local n
  set_flavor "${1:-${RELAY_TEST_FLAVOR:-mariadb-10.11}}"
  echo "export RELAY_TEST_FLAVOR='$FLAVOR'"
  for n in "${NAMES[@]}"; do
    printf "export RELAY_TEST_%s_DSN='root@tcp(127.0.0.1:%s)/'\n" "${n^^}" "$(port_of "$n")"
  done
  echo "export RELAY_TEST_AMQP_URL='amqp://guest:guest@127.0.0.1:${AMQP_PORT_OF[$FLAVOR]}/'"
  echo "export RELAY_TEST_REDIS_ADDR='127.0.0.1:6379'"
  echo "export RELAY_TEST_REDIS_SENTINEL_ADDRS='127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392'"
  echo "export RELAY_TEST_REDIS_CLUSTER_ADDRS='$(printf '127.0.0.1:%s,' "${RTOPO_CLUSTER[@]}" | sed 's/,$//')'"
  printf 'export RELAY_STACK_DIR=%q\n' "$STACK_DIR"
}

cmd_one() {  # start|stop|restart [FLAVOR/]NAME
  local verb=$1 n=${2:-}
  set_flavor "${RELAY_TEST_FLAVOR:-mariadb-10.11}"
  if [[ $n == */* ]]; then set_flavor "${n%%/*}"; n=${n#*/}; fi
  [[ -n $n && -v OFFSET[$n] ]] || die "usage: $0 $verb [FLAVOR/]primary|replica|replica2|misconf|switch1|switch2|switch3"
  lock
  [[ -z ${CHROOT_OF[$FLAVOR]} ]] || mount_chroot "$CHROOT_BASE/${CHROOT_OF[$FLAVOR]}"
  [[ $verb == start ]] || stop_instance "$n"
  [[ $verb == stop ]] && return 0
  start_instance "$n"
  [[ $n == replica* ]] && ensure_replication "$n"
  log "$FLAVOR $n: up on 127.0.0.1:$(port_of "$n")"
}

# rabbitmqctl ARGS: the CLI of the broker that RELAY_TEST_FLAVOR's tests use.
cmd_rabbitmqctl() {
  set_flavor "${RELAY_TEST_FLAVOR:-mariadb-10.11}"
  if [[ ${AMQP_PORT_OF[$FLAVOR]} == 5672 ]]; then rabbitmqctl "$@"; else rabbit4ctl "$@"; fi
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  env) shift; cmd_env "$@" ;;
  start|stop|restart) cmd_one "$@" ;;
  rabbitmqctl) shift; cmd_rabbitmqctl "$@" ;;
  packages) ensure_packages ;;
  chroots) ensure_packages; ensure_chroots mysql mariadb ;;
  redis-topologies) lock; ensure_redis_topologies ;;
  rabbit-cluster) ensure_packages; lock; ensure_rabbit_cluster ;;
  rabbit-cluster-ctl) shift; cmd_rabbit_cluster_ctl "$@" ;;
  *) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 2 ;;
esac
