# Sourced by the sweep scripts: start_job NAME MODE SECONDS starts `planted.py MODE` in the
# background with its stdin and stdout on the FIFOs in.NAME and out.NAME of the current
# directory (its stderr in NAME.py.err); $! is its pid.
start_job() {
  rm -f "in.$1" "out.$1"
  mkfifo "in.$1" "out.$1"
  PYTHONUNBUFFERED=1 python3 "$HERE/planted.py" "$2" --seconds "$3" <"in.$1" >"out.$1" 2>"$1.py.err" &
}
