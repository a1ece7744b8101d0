# Sourced by the tests that start `dsinfer serve --port 0`: wait_for_port LOG prints the port the
# server's log announces, waiting up to 30 s; nothing when it never does.
wait_for_port() {
  local port=""
  for _ in $(seq 1 300); do
    port="$(sed -n 's|.*on http://127.0.0.1:\([0-9]*\).*|\1|p' "$1")"
    [ -n "$port" ] && break
    sleep 0.1
  done
  echo "$port"
}
