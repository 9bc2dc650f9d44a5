#!/bin/sh
# The images' entrypoint.
#   head    (default) start a Ray head node, then `grounded up` on it; docker stop (SIGTERM,
#           forwarded by tini) stops the application, and the container's end stops Ray.
#   worker  join the Ray cluster at $GROUNDED_RAY_ADDRESS (host:port of the head's GCS) and
#           lend it this machine's CPUs and GPUs until stopped.
#   any other command runs as given, e.g. `grounded keys create --tenant acme`.
set -eu

role="${1:-head}"
[ "$#" -gt 0 ] && shift

case "$role" in
head)
    ray start --head --port="${GROUNDED_RAY_PORT:-6379}" \
        --dashboard-host=0.0.0.0 --dashboard-port="${GROUNDED_DASHBOARD_PORT:-8265}" \
        --metrics-export-port="${GROUNDED_METRICS_PORT:-8080}" \
        --disable-usage-stats
    exec grounded --config "$GROUNDED_CONFIG" up --address auto "$@"
    ;;
worker)
    if [ -z "${GROUNDED_RAY_ADDRESS:-}" ]; then
        echo "worker: set GROUNDED_RAY_ADDRESS to the head node's host:port (e.g. head:6379)" >&2
        exit 2
    fi
    exec ray start --address="$GROUNDED_RAY_ADDRESS" \
        --metrics-export-port="${GROUNDED_METRICS_PORT:-8080}" \
        --disable-usage-stats --block "$@"
    ;;
*)
    exec "$role" "$@"
    ;;
esac
