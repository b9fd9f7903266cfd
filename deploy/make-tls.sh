#!/usr/bin/env bash
# A CA of the lab's own and PostgreSQL's server certificate, for docker/compose.yaml.
#
#   bash deploy/make-tls.sh DB_HOST [OUT]
#
# DB_HOST: the name (or address) workers on other hosts use for the database machine; the
# certificate also names `postgres` (the service, inside the stack) and localhost. OUT (default
# docker/secrets) gets postgres_ca.crt (give it to every worker host), postgres_tls.crt and
# postgres_tls.key (keep these on the database machine), and postgres_ca.key (keep it offline:
# it signs certificates). An existing CA in OUT is used again, so that workers keep trusting it.
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
host="$1"
out="${2:-$(dirname "$0")/../docker/secrets}"
mkdir -p "$out"
cd "$out"
umask 077
if [ ! -s postgres_ca.key ]; then
  openssl req -new -x509 -nodes -days 3650 -subj "/CN=operator-db lab CA" \
    -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout postgres_ca.key -out postgres_ca.crt 2> /dev/null
fi
if [[ "$host" =~ ^[0-9.]+$|: ]]; then
  alt="IP:$host"
else
  alt="DNS:$host"
fi
openssl req -new -nodes -subj "/CN=$host" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout postgres_tls.key -out postgres_tls.csr 2> /dev/null
printf 'subjectAltName=%s,DNS:postgres,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
  "$alt" > postgres_tls.ext
openssl x509 -req -days 825 -in postgres_tls.csr -CA postgres_ca.crt -CAkey postgres_ca.key \
  -CAcreateserial -extfile postgres_tls.ext -out postgres_tls.crt 2> /dev/null
rm -f postgres_tls.csr postgres_tls.ext postgres_ca.srl
chmod 0644 postgres_ca.crt postgres_tls.crt
echo "make-tls.sh: $out/postgres_ca.crt, postgres_tls.crt, postgres_tls.key for $host"
