#!/usr/bin/env bash
# stepmodel.sh GPUTRACE OUT - the step model's H200 run: the competing-fix twins
# (competing.py), the blind set (unseen.py) and the planted set (planted.py), each traced by
# GPUTRACE; summaries in OUT/*.md, everything in OUT/stepmodel.tar.gz.
# Environment: UNSEEN_SECONDS, UNSEEN_TRACE_SECONDS (defaults 5 and 4 here), SKIP_PLANTED=1.
set -u
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
export UNSEEN_SECONDS=${UNSEEN_SECONDS:-5} UNSEEN_TRACE_SECONDS=${UNSEEN_TRACE_SECONDS:-4}
mkdir -p "$OUT/competing" "$OUT/unseen" "$OUT/planted"
UNSEEN_JOB=$HERE/competing.py "$HERE/unseen.sh" "$BIN" "$OUT/competing" \
    sync_book_planted sync_book_nosync sync_book_nobook sync_book_lognth sync_book_graph mlp_item_planted mlp_item_nosync mlp_item_lognth mlp_item_graph
python3 "$HERE/summarize_competing.py" "$OUT/competing" > "$OUT/competing.md" 2>&1
"$HERE/unseen.sh" "$BIN" "$OUT/unseen"
python3 "$HERE/summarize_unseen.py" "$OUT/unseen" > "$OUT/unseen.md" 2>&1
if [ -z "${SKIP_PLANTED:-}" ]; then
    "$HERE/planted.sh" "$BIN" "$OUT/planted" item item_fixed pageable pageable_fixed alloc_churn alloc_churn_fixed \
        loader_inline loader_inline_fixed launch_bound healthy_gemm healthy_train
    python3 "$HERE/twins.py" "$OUT/planted" > "$OUT/planted.md" 2>&1
fi
tar -C "$OUT" -czf "$OUT/stepmodel.tar.gz" competing unseen planted
cat "$OUT"/*.md
