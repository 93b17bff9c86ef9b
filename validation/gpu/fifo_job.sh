# Sourced by the sweep scripts: start_job NAME MODE SECONDS starts `planted.py MODE` in the
# background with its stdin and stdout on the FIFOs in.NAME and out.NAME of the current
# directory (its stderr in NAME.py.err); $! is its pid.
start_job() {
  rm -f "in.$1" "out.$1"
  mkfifo "in.$1" "out.$1"
  PYTHONUNBUFFERED=1 python3 "$HERE/planted.py" "$2" --seconds "$3" <"in.$1" >"out.$1" 2>"$1.py.err" &
}

# start_pair JOB_MODE OTHER_NAME OTHER_MODE SECONDS: `job` (planted.py JOB_MODE) and a second
# process OTHER_NAME (planted.py OTHER_MODE), each started with start_job, waited for until
# both say they are ready, then released together. Sets $job and $other (their pids), $jin
# and $oin (the descriptors that hold their stdin open: close them with `exec {jin}>&-
# {oin}>&-` at the end) and $ready (their first lines).
start_pair() {
  start_job job "$1" "$4"
  job=$!
  start_job "$2" "$3" "$4"
  other=$!
  local jout oout a b
  exec {jin}>in.job {jout}<out.job {oin}>"in.$2" {oout}<"out.$2"
  read -r -u "$jout" a
  read -r -u "$oout" b
  echo go >&"$jin"
  echo go >&"$oin"
  ready="$a, $b"
}
