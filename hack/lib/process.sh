# Processes started in the background with a pid file. Sourced by the
# scripts that stop what they started.
#
#   stop_pidfile PIDFILE   SIGTERM the process PIDFILE names, SIGKILL it
#                          after 10 s, and remove PIDFILE (no-op without it)

stop_pidfile() {
  local pidfile=$1 pid
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}
