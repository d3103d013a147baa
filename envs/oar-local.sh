#!/usr/bin/env bash
# A one-node OAR 2.5 cluster (Grid'5000's batch scheduler) on this machine, to run the OAR
# profiles for real (tests/test_oar.py, README "Scaling out").
#
#   envs/oar-local.sh check               # exit 0 if a cluster can start here, else print why, exit 1
#   envs/oar-local.sh start STATE_DIR     # PostgreSQL + OAR database, oar-node's sshd, Almighty
#   envs/oar-local.sh stop STATE_DIR      # deletes the cluster's jobs, stops what start started
#
# Daemons: PostgreSQL (as postgres, 127.0.0.1 only, data in STATE_DIR/pg), the oar-node
# sshd (as root, OAR's own sshd_config), OAR's server Almighty (as oar). The node is this
# machine, one OAR resource per core, property `cluster` = the names of OAR_LOCAL_CLUSTERS
# in turn (a job of profiles/calibrate-oar selects its machine type with it).
# OAR reads /etc/oar/oar.conf only (oarsub is a setuid wrapper): start saves it to
# STATE_DIR/oar.conf.orig, writes this cluster's, and stop puts the saved one back.
# OAR refuses jobs from root and oar (admission rule): submit as another user, e.g.
# `runuser -u testbed-oar -- snakemake --profile profiles/oar ...`.
#
# Needs root and the Debian packages oar-server, oar-server-pgsql, oar-node, oar-user,
# oar-user-pgsql, postgresql (`TESTBED_OAR=1 bash envs/setup.sh` installs them and the
# submitting user testbed-oar). The MySQL flavour does not work on bookworm: OAR 2.5.9's
# mysql_structure.sql names a column `force`, a reserved word of MariaDB 10.11 (ERROR 1064).
#
# Settings (environment variables):
#   OAR_LOCAL_CLUSTERS="local"      values of the resources' `cluster` property, one per core in turn
#   OAR_LOCAL_PORT=6667             port of the oar-node sshd (PostgreSQL: OAR_LOCAL_PORT + 1)
set -euo pipefail

die() { printf 'oar-local: error: %s\n' "$*" >&2; exit 1; }
say() { printf 'oar-local: %s\n' "$*" >&2; }
PORT="${OAR_LOCAL_PORT:-6667}"
PG_PORT=$((PORT + 1))
CLUSTERS="${OAR_LOCAL_CLUSTERS:-local}"
OARCONF=/etc/oar/oar.conf
PGBIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"

check() {
  local c
  for c in oarsub oarstat oardel oarnodesetting oarproperty oar-database /usr/sbin/oar-server /usr/sbin/sshd; do
    command -v "$c" >/dev/null 2>&1 \
      || { echo "$c not found (TESTBED_OAR=1 bash envs/setup.sh installs OAR)"; return 1; }
  done
  [ -n "$PGBIN" ] && [ -x "$PGBIN/initdb" ] || { echo "PostgreSQL not installed (TESTBED_OAR=1 bash envs/setup.sh)"; return 1; }
  [ -f /usr/lib/oar/database/pg_structure.sql ] || { echo "oar-server-pgsql not installed"; return 1; }
  [ "$(id -u)" = 0 ] || { echo "not root: OAR's daemons run as root, oar and postgres"; return 1; }
  [ -f "$OARCONF" ] || { echo "$OARCONF missing (oar-common)"; return 1; }
  if [ -s /var/run/oar-server.pid ] && kill -0 "$(cat /var/run/oar-server.pid)" 2>/dev/null; then
    echo "an OAR server already runs (pid $(cat /var/run/oar-server.pid))"; return 1
  fi
  return 0
}

cmd="${1:-}"
case "$cmd" in
  check) why="$(check)" || { echo "$why"; exit 1; }; exit 0 ;;
  start|stop) ;;
  *) die "usage: $0 check | start|stop STATE_DIR" ;;
esac
[ $# -eq 2 ] || die "usage: $0 $cmd STATE_DIR"
[ "$cmd" = start ] && mkdir -p "$2"
[ -d "$2" ] || die "$2: no such directory"
DIR="$(cd "$2" && pwd)"

pid_of() { if [ -s "$DIR/$1.pid" ]; then cat "$DIR/$1.pid"; fi; }
stop_pid() { # name: TERM, wait up to 20 s, then KILL; only the pid this script recorded
  local p i; p="$(pid_of "$1")"
  if [ -z "$p" ] || ! kill -0 "$p" 2>/dev/null; then rm -f "$DIR/$1.pid"; return 0; fi
  kill "$p" 2>/dev/null || true
  for i in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then say "$1 ($p) did not stop in 20 s: killed"; kill -9 "$p" 2>/dev/null || true; fi
  rm -f "$DIR/$1.pid"
}
stop_all() {
  if [ -s "$DIR/almighty.pid" ] && kill -0 "$(cat "$DIR/almighty.pid")" 2>/dev/null; then
    # jobs first, while Almighty can still end them
    local ids i
    ids="$(oarstat 2>/dev/null | awk 'NR > 2 && $1 ~ /^[0-9]+$/ {print $1}' || true)"
    [ -z "$ids" ] || oardel $ids >/dev/null 2>&1 || true
    for i in $(seq 100); do [ -z "$(oarstat 2>/dev/null | sed -n '3,$p')" ] && break; sleep 0.2; done
  fi
  stop_pid almighty
  rm -f /var/run/oar-server.pid
  stop_pid sshd
  if [ -d "$DIR/pg/data" ] && [ -s "$DIR/pg/data/postmaster.pid" ]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DIR/pg/data" stop -m fast >/dev/null 2>&1 || true
  fi
  if [ -f "$DIR/oar.conf.orig" ]; then cp "$DIR/oar.conf.orig" "$OARCONF" && rm -f "$DIR/oar.conf.orig"; fi
}

if [ "$cmd" = stop ]; then
  stop_all
  say "stopped ($DIR)"
  exit 0
fi

# ------------------------------------------------------------------------------ start
why="$(check)" || die "$why"
[ ! -f "$DIR/oar.conf.orig" ] || die "$DIR holds a saved $OARCONF: a cluster runs there (stop it first)"
for p in "$PORT" "$PG_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "TCP port $p is in use (set OAR_LOCAL_PORT)"; fi
done
chmod 755 "$DIR"
trap 'if [ $? != 0 ]; then stop_all; fi' EXIT
HOST="$(hostname -s)"

# PostgreSQL, OAR's database (Grid'5000 runs OAR on PostgreSQL too)
mkdir -p "$DIR/pg"; chown postgres: "$DIR/pg"
if [ ! -d "$DIR/pg/data" ]; then
  echo postgres >"$DIR/pg/pw"; chown postgres: "$DIR/pg/pw"; chmod 600 "$DIR/pg/pw"
  runuser -u postgres -- "$PGBIN/initdb" -D "$DIR/pg/data" -A scram-sha-256 -U postgres \
    --pwfile="$DIR/pg/pw" >"$DIR/pg/initdb.log" 2>&1 || die "initdb failed, see $DIR/pg/initdb.log"
  rm -f "$DIR/pg/pw"
fi
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DIR/pg/data" -l "$DIR/pg/postgres.log" -w -t 60 \
  -o "-p $PG_PORT -k $DIR/pg -c listen_addresses=127.0.0.1" start >/dev/null \
  || die "PostgreSQL did not start, see $DIR/pg/postgres.log"

# this cluster's oar.conf
cp "$OARCONF" "$DIR/oar.conf.orig"
sed -e 's/^DB_TYPE=.*/DB_TYPE="Pg"/' -e 's/^DB_HOSTNAME=.*/DB_HOSTNAME="127.0.0.1"/' \
    -e "s/^DB_PORT=.*/DB_PORT=\"$PG_PORT\"/" -e 's/^DB_BASE_PASSWD=.*/DB_BASE_PASSWD="oar"/' \
    -e 's/^DB_BASE_PASSWD_RO=.*/DB_BASE_PASSWD_RO="oar_ro"/' -e "s/^SERVER_HOSTNAME=.*/SERVER_HOSTNAME=\"$HOST\"/" \
    -e "s|^LOG_FILE=.*|LOG_FILE=\"$DIR/oar.log\"|" \
    -e "s|^OPENSSH_CMD=.*|OPENSSH_CMD=\"/usr/bin/ssh -p $PORT -e none\"|" \
    -e 's/^JOB_RESOURCE_MANAGER_PROPERTY_DB_FIELD=/#JOB_RESOURCE_MANAGER_PROPERTY_DB_FIELD=/' \
    "$DIR/oar.conf.orig" >"$OARCONF"
# no cpuset: OAR's job_resource_manager needs a cpuset cgroup hierarchy of its own
touch "$DIR/oar.log"; chown oar "$DIR/oar.log"
oar-database --create --db-type=Pg --db-host=127.0.0.1 --db-port="$PG_PORT" \
  --db-admin-user=postgres --db-admin-pass=postgres -y >"$DIR/oar-database.log" 2>&1 \
  || die "oar-database --create failed, see $DIR/oar-database.log"

# oar-node: the server reaches the node through this sshd, as the oar user
mkdir -p /run/sshd
/usr/sbin/sshd -f /etc/oar/sshd_config -o Port="$PORT" -o PidFile="$DIR/sshd.pid" -E "$DIR/sshd.log" \
  || die "oar-node sshd did not start, see $DIR/sshd.log"
runuser -u oar -- ssh -p "$PORT" -o BatchMode=yes "$HOST" true 2>>"$DIR/sshd.log" \
  || die "oar cannot ssh to $HOST:$PORT, see $DIR/sshd.log"

# resources: one per core of this machine
for prop in host cpu core cluster; do
  oarproperty -l | grep -qx "$prop" || oarproperty -a "$prop" $([ "$prop" = cpu ] || [ "$prop" = core ] || echo -c) >/dev/null
done
read -r -a names <<<"$CLUSTERS"
cores="$(nproc)"
for c in $(seq "$cores"); do
  oarnodesetting -a -h "$HOST" -p host="$HOST" -p cpu=1 -p core="$c" -p cpuset=$((c - 1)) \
    -p cluster="${names[$(((c - 1) % ${#names[@]}))]}" >/dev/null || die "oarnodesetting failed"
done

/usr/sbin/oar-server || die "oar-server did not start, see $DIR/oar.log"
for i in $(seq 50); do [ -s /var/run/oar-server.pid ] && break; sleep 0.1; done
cp /var/run/oar-server.pid "$DIR/almighty.pid"
sleep 1
kill -0 "$(cat "$DIR/almighty.pid")" 2>/dev/null || die "Almighty exited, see $DIR/oar.log"
say "cluster up: $HOST, $cores resources (cluster: $CLUSTERS), Almighty $(cat "$DIR/almighty.pid")"
