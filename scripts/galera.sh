#!/usr/bin/env bash
# A three-node MariaDB Galera cluster on loopback ports, for the cluster lane (make test-cluster).
#
#   scripts/galera.sh start        a fresh cluster: node 1 bootstraps it, nodes 2 and 3 join (SST by rsync)
#   scripts/galera.sh stop         every node, gracefully; the datadirs stay under var/galera/
#   scripts/galera.sh status       each node's port, state and the cluster size it sees
#   scripts/galera.sh kill N       kill -9 node N (a crash)
#   scripts/galera.sh node-start N start node N again; it rejoins (IST, or SST when it missed too much)
#   scripts/galera.sh url          the WEAVE_DATABASE_URL naming the three nodes
#   scripts/galera.sh counts       transactions and certification conflicts since the nodes started
#
# Node N listens for SQL on 3310+N, for group communication on 4566+N, for IST on 4576+N and for SST on
# 4586+N, all on 127.0.0.1. Its datadir, socket, pid file and log are under var/galera/nodeN/. The default
# server (3306) and its datadir are never touched.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD/var/galera"
# The server's own account when started by root (SST's rsync daemon would otherwise write as nobody).
RUN_AS=$([ "$(id -u)" = 0 ] && echo mysql || id -un)
PROVIDER=/usr/lib/galera/libgalera_smm.so
CLUSTER="gcomm://127.0.0.1:4567,127.0.0.1:4568,127.0.0.1:4569"

sql_port() { echo $((3310 + $1)); }
cnf() { echo "$ROOT/node$1/my.cnf"; }

ensure_installed() {
  if [ ! -x /usr/sbin/mariadbd ] || [ ! -f "$PROVIDER" ] || ! command -v rsync >/dev/null; then
    if [ "$(id -u)" != 0 ]; then
      echo "galera.sh: mariadb-server, galera-4 and rsync are needed (run as root to install them)" >&2
      exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server galera-4 rsync >/dev/null
  fi
}

write_cnf() {
  local n=$1 dir="$ROOT/node$1"
  mkdir -p "$dir/data"
  chown "$RUN_AS" "$dir" "$dir/data"
  cat >"$(cnf "$n")" <<EOF
[mysqld]
datadir=$dir/data
socket=$dir/mysqld.sock
pid-file=$dir/mysqld.pid
log-error=$dir/error.log
port=$(sql_port "$n")
bind-address=127.0.0.1
max_connections=500
default_storage_engine=InnoDB
binlog_format=ROW
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=128M
# A test lane: durability comes from the two other nodes, not from a flush per commit.
innodb_flush_log_at_trx_commit=2
wsrep_on=ON
wsrep_provider=$PROVIDER
wsrep_cluster_name=weave
wsrep_cluster_address=$CLUSTER
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$((4566 + n))
wsrep_node_incoming_address=127.0.0.1:$(sql_port "$n")
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$((4566 + n));ist.recv_addr=127.0.0.1:$((4576 + n));evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$((4586 + n))
wsrep_slave_threads=2
EOF
}

client() { mariadb -h127.0.0.1 -P"$(sql_port "$1")" -uroot -N -B -e "$2" 2>/dev/null; }

wsrep() { client "$1" "SHOW STATUS LIKE '$2'" | cut -f2; }

wait_synced() {
  local n=$1
  for _ in $(seq 1 360); do
    if [ "$(wsrep "$n" wsrep_local_state_comment)" = Synced ] && [ "$(wsrep "$n" wsrep_ready)" = ON ]; then
      return 0
    fi
    sleep 0.5
  done
  echo "galera.sh: node $n did not reach Synced; see $ROOT/node$n/error.log" >&2
  tail -20 "$ROOT/node$n/error.log" >&2 || true
  return 1
}

node_start() {
  local n=$1
  shift
  write_cnf "$n"
  nohup /usr/sbin/mariadbd --defaults-file="$(cnf "$n")" --user="$RUN_AS" "$@" >/dev/null 2>&1 &
  wait_synced "$n"
}

node_kill() {
  local pid_file="$ROOT/node$1/mysqld.pid"
  if [ -s "$pid_file" ]; then
    kill -9 "$(cat "$pid_file")" 2>/dev/null || true
    rm -f "$pid_file"
  fi
}

node_stop() {
  local pid_file="$ROOT/node$1/mysqld.pid"
  [ -s "$pid_file" ] || return 0
  local pid
  pid=$(cat "$pid_file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  kill -9 "$pid" 2>/dev/null || true
}

case "${1:-}" in
  start)
    ensure_installed
    for n in 3 2 1; do node_stop "$n"; done
    rm -rf "$ROOT"
    for n in 1 2 3; do
      write_cnf "$n"
      mariadb-install-db --defaults-file="$(cnf "$n")" --user="$RUN_AS" --auth-root-authentication-method=normal \
        --skip-test-db >"$ROOT/node$n/install.log" 2>&1
    done
    node_start 1 --wsrep-new-cluster
    node_start 2
    node_start 3
    echo "galera: 3 nodes Synced, cluster size $(wsrep 1 wsrep_cluster_size)"
    ;;
  stop)
    for n in 3 2 1; do node_stop "$n"; done
    ;;
  status)
    for n in 1 2 3; do
      echo "node $n :$(sql_port "$n") $(wsrep "$n" wsrep_local_state_comment || echo down) size $(wsrep "$n" wsrep_cluster_size || echo -)"
    done
    ;;
  counts)
    commits=0 failures=0 aborts=0
    for n in 1 2 3; do
      commits=$((commits + $(wsrep "$n" wsrep_local_commits || echo 0)))
      failures=$((failures + $(wsrep "$n" wsrep_local_cert_failures || echo 0)))
      aborts=$((aborts + $(wsrep "$n" wsrep_local_bf_aborts || echo 0)))
    done
    echo "cluster: $commits transactions committed, $((failures + aborts)) certification conflicts" \
      "($failures failed certification, $aborts aborted by a replicated write)"
    ;;
  kill) node_kill "$2" ;;
  node-start) node_start "$2" ;;
  url) echo "mysql://root@127.0.0.1:3311,127.0.0.1:3312,127.0.0.1:3313/${2:-weave}" ;;
  *)
    echo "usage: scripts/galera.sh start|stop|status|kill N|node-start N|url [database]" >&2
    exit 2
    ;;
esac
