# syntax=docker/dockerfile:1
# PostgreSQL from Debian's `postgresql` package, for machines that cannot pull the official
# image that docker/compose.yaml names (scripts/images.sh builds it; the lab's compose keeps the
# official one). It honours the same contract: POSTGRES_USER, POSTGRES_PASSWORD(_FILE),
# POSTGRES_DB, PGDATA, the scripts in /docker-entrypoint-initdb.d/ on the first start, and a
# command of `postgres -c NAME=VALUE ...`.
# DEBIAN_IMAGE is a Debian bookworm image that already holds the package (scripts/images.sh
# makes it with mmdebstrap: no network is needed while building).
ARG DEBIAN_IMAGE=localhost/opdb-debian-postgresql:bookworm
FROM ${DEBIAN_IMAGE}
ENV PGDATA=/var/lib/postgresql/data \
    PATH=/usr/lib/postgresql/15/bin:$PATH
COPY docker/postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN mkdir -p /docker-entrypoint-initdb.d "$PGDATA" /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 0700 "$PGDATA"
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
