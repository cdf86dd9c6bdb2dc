#!/bin/sh
# Stand-in images' entrypoint: started as root, run the command as $DROP_TO (as the official
# redis image does with gosu).
set -e
if [ "$(id -u)" = 0 ] && [ -n "${DROP_TO:-}" ]; then
    exec setpriv --reuid="$DROP_TO" --regid="$DROP_TO" --init-groups "$@"
fi
exec "$@"
