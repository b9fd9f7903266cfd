#!/bin/sh
# The entrypoint of docker/postgres-debian.Dockerfile: the official postgres image's contract
# (first start: initdb, the database, /docker-entrypoint-initdb.d/*.sh and *.sql; then the
# server), on Debian's package. Runs as root only to own its folders, then as `postgres`.
set -eu

if [ "${1#-}" != "$1" ]; then
    set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
    exec "$@"  # another command (a shell that prepares files, say), as the image's user
fi

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
    POSTGRES_PASSWORD="$(cat "$POSTGRES_PASSWORD_FILE")"
fi
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
export POSTGRES_USER POSTGRES_DB

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "docker-entrypoint.sh: POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) is required" >&2
        exit 1
    fi
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 -D "$PGDATA" > /dev/null
    rm -f "$pwfile"
    # As the official image: password logins from anywhere (the published port decides who).
    printf 'host all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
    printf "listen_addresses = '*'\n" >> "$PGDATA/postgresql.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -q \
            -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "docker-entrypoint.sh: running $f"; . "$f" ;;
            *.sql) echo "docker-entrypoint.sh: running $f"
                psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -q -f "$f" ;;
            *) ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
    echo "docker-entrypoint.sh: database initialised"
fi

exec "$@"
