# Usage: python3 scripts/bench_change_check.py PAGES FILE.db (writes about 275 KB a page; root drops the page cache).
# The visual cache's per-question change check at N pages: the old stamp (count and sums over the
# model's rows, plus the legacy rows' count) against schema 7's counter row. Same tables and
# indexes as the store's SQLite schema (v3 + v7); int8 blobs of ColQwen2's size (700 x 132 B).
import os, sqlite3, sys, time, statistics
n = int(sys.argv[1]); path = sys.argv[2]
if os.path.exists(path): os.remove(path)
db = sqlite3.connect(path); db.execute("PRAGMA journal_mode=WAL")
db.executescript("""
CREATE TABLE ip_page_vectors (doc_id INTEGER NOT NULL, page_no INTEGER NOT NULL, model TEXT NOT NULL,
  dim INTEGER NOT NULL, count INTEGER NOT NULL, vectors BLOB NOT NULL, encoding TEXT NOT NULL DEFAULT 'f32',
  PRIMARY KEY (doc_id, page_no));
CREATE INDEX ip_page_vectors_model ON ip_page_vectors (model, dim);
CREATE TABLE ip_page_codes (doc_id INTEGER NOT NULL, page_no INTEGER NOT NULL, model TEXT NOT NULL,
  dim INTEGER NOT NULL, count INTEGER NOT NULL, int8 BLOB NOT NULL, PRIMARY KEY (doc_id, page_no));
CREATE INDEX ip_page_codes_model ON ip_page_codes (model, dim);
CREATE TABLE ip_visual_changes (model TEXT NOT NULL, dim INTEGER NOT NULL, generation INTEGER NOT NULL,
  pages INTEGER NOT NULL, PRIMARY KEY (model, dim));
""")
codes = os.urandom(700 * 132); halves = os.urandom(700 * 256)
for i in range(n):
    d, p = i // 10 + 1, i % 10 + 1
    db.execute("INSERT INTO ip_page_vectors VALUES (?,?,?,?,?,?, 'f16')", (d, p, 'col', 128, 700, halves))
    db.execute("INSERT INTO ip_page_codes VALUES (?,?,?,?,?,?)", (d, p, 'col', 128, 700, codes))
    if i % 5000 == 4999: db.commit()
db.execute("INSERT INTO ip_visual_changes VALUES ('col', 128, ?, ?)", (n, n)); db.commit(); db.close()
old_a = """SELECT count(*), CAST(coalesce(sum(doc_id), 0) AS BIGINT), CAST(coalesce(sum(page_no), 0) AS BIGINT),
  coalesce(max(doc_id), 0) FROM ip_page_codes WHERE model = ?1 AND dim = ?2"""
old_b = """SELECT count(*) FROM (SELECT v.doc_id, v.page_no, v.vectors, v.encoding FROM ip_page_vectors v
  WHERE v.model = ?1 AND v.dim = ?2 AND NOT EXISTS (SELECT 1 FROM ip_page_codes c WHERE c.doc_id = v.doc_id
  AND c.page_no = v.page_no)) legacy"""
new = "SELECT generation, pages FROM ip_visual_changes WHERE model = ?1 AND dim = ?2"
def run(qs, reps):
    db = sqlite3.connect(path); t = []
    for _ in range(reps):
        s = time.perf_counter()
        for q in qs: db.execute(q, ('col', 128)).fetchall()
        t.append((time.perf_counter() - s) * 1000)
    db.close(); return statistics.median(t), max(t)
os.system("sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null")
cold_old = run([old_a, old_b], 1)
warm_old = run([old_a, old_b], 9)
new_t = run([new], 200)
print(f"pages={n} file={os.path.getsize(path)/1e9:.1f} GB  old stamp: cold {cold_old[0]:.1f} ms, warm p50 {warm_old[0]:.1f} ms (max {warm_old[1]:.1f});  counter row: p50 {new_t[0]*1000:.1f} us (max {new_t[1]*1000:.1f} us)")
