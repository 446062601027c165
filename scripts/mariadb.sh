#!/usr/bin/env bash
# Make sure a MariaDB server answers on 127.0.0.1:3306; start the local one when it is installed.
set -euo pipefail
ping() { mysqladmin --host=127.0.0.1 --user=root ping >/dev/null 2>&1; }
ping && exit 0
if [ -x /usr/sbin/mariadbd ] && [ "$(id -u)" = 0 ]; then
  echo "mariadb: starting the local server"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 60); do
    ping && exit 0
    sleep 0.5
  done
fi
echo "mariadb: no server answers on 127.0.0.1:3306" >&2
exit 1
