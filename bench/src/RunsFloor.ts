/**
 * The disk's floor under a run's stages: the durable writes of a 4-stage run done by hand with
 * `node:fs` and `node:sqlite`, nothing else (no Effect, no schema, no hashing, no model), in the
 * order the guarantees need, so `runs.stage_overhead_ms` can be read against what this disk
 * allows for the same guarantees (`runs.stage_disk_floor_ms`).
 *
 * It makes the same syscalls a noema run makes (read off `strace -f` of one):
 * - the run: its directory, `run.json` (temporary file, fsync, link, unlink), the two
 *   directories that gained a name fsynced together, then two commits (the run created; the
 *   run started with its first stage);
 * - each stage: its directory and `artifacts/`; `input.json`, the answer's artifact and
 *   `output.json` written to temporary files and fsynced together; each linked into place;
 *   the manifest's bytes fsynced together with the directories that gained names (4 for the
 *   first stage, which also creates `stages/`, then 3); the manifest linked, its directory
 *   fsynced; one commit for the stage's events (with the next stage's start).
 *
 * So the same 36 file and directory fsyncs and 6 commits a run (the bench checks the fsyncs
 * against noema's count), and the same waits one after another: a stage waits on the disk four
 * times (the files, the directories with the manifest's bytes, the manifest's directory, the
 * commit). Its commits write a small table of its own: fewer pages than noema's store writes
 * (which keeps its projections and indexes), so the floor errs low.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"

const fsyncInPool = (fd: number): Promise<void> =>
  new Promise((resolve, reject) => fs.fsync(fd, (error) => (error === null ? resolve() : reject(error))))

const fsyncDirectory = async (directory: string): Promise<void> => {
  const fd = fs.openSync(directory, "r")
  try {
    await fsyncInPool(fd)
  } finally {
    fs.closeSync(fd)
  }
}

/** Writes `data` to a temporary file beside `file` and fsyncs it; resolves to its name. */
const writeTemporary = async (file: string, data: string): Promise<string> => {
  const temporary = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`)
  const fd = fs.openSync(temporary, "wx", 0o600)
  try {
    fs.writeFileSync(fd, data)
    await fsyncInPool(fd)
  } finally {
    fs.closeSync(fd)
  }
  return temporary
}

const linkInto = (temporary: string, file: string): void => {
  fs.linkSync(temporary, file)
  fs.unlinkSync(temporary)
}

/** A file of about the size noema writes there (input.json 175 bytes, output.json 72, manifest 596). */
const payload = (what: string, bytes: number): string => JSON.stringify({ what, pad: "x".repeat(bytes) })

export interface Floor {
  /** One 4-stage run's durable writes under `runs/<id>/`. */
  readonly run: (id: string) => Promise<void>
  readonly close: () => void
}

/** The floor writing runs under `root` and its events to the SQLite file `filename` (WAL, FULL). */
export const make = (root: string, filename: string, stages = 4): Floor => {
  const db = new DatabaseSync(filename)
  db.exec("PRAGMA journal_mode = WAL")
  db.exec("PRAGMA synchronous = FULL")
  db.exec(
    "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, status TEXT NOT NULL, updated_at INTEGER NOT NULL);" +
      "CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL," +
      " data TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
  )
  const begin = db.prepare("BEGIN IMMEDIATE")
  const commit = db.prepare("COMMIT")
  const insertRun = db.prepare("INSERT INTO runs (id, status, updated_at) VALUES (?, 'created', ?)")
  const insertEvent = db.prepare("INSERT INTO events (run_id, seq, type, data) VALUES (?, ?, ?, ?)")
  const updateRun = db.prepare("UPDATE runs SET status = ?, updated_at = ? WHERE id = ?")
  const runsDirectory = path.join(root, "runs")
  fs.mkdirSync(runsDirectory, { recursive: true, mode: 0o700 })

  /** One transaction: `types` appended as the run's next events, the run's status set. */
  const append = (id: string, seq: number, status: string, types: ReadonlyArray<string>): number => {
    begin.run()
    for (const type of types) insertEvent.run(id, seq++, type, payload(type, 120))
    updateRun.run(status, Date.now(), id)
    commit.run()
    return seq
  }

  const stage = async (runDirectory: string, position: number): Promise<void> => {
    const stages = path.join(runDirectory, "stages")
    const directory = path.join(stages, `0${position}-stage`)
    const named = position === 1 ? [runDirectory, stages] : [stages]
    if (position === 1) fs.mkdirSync(stages, { mode: 0o700 })
    fs.mkdirSync(directory, { mode: 0o700 })
    fs.mkdirSync(path.join(directory, "artifacts"), { mode: 0o700 })
    if (position > 1) {
      const previous = path.join(stages, `0${position - 1}-stage`)
      fs.readFileSync(path.join(previous, "output.json"))
      fs.readFileSync(path.join(previous, "artifacts", "answer.md"))
    }
    const files = [
      [path.join(directory, "input.json"), payload("input", 150)],
      [path.join(directory, "artifacts", "answer.md"), "done: a short answer"],
      [path.join(directory, "output.json"), payload("output", 50)]
    ] as const
    const temporaries = await Promise.all(files.map(([file, data]) => writeTemporary(file, data)))
    for (const [index, [file]] of files.entries()) linkInto(temporaries[index] as string, file)
    const manifest = path.join(directory, "manifest.json")
    const [temporary] = await Promise.all([
      writeTemporary(manifest, payload("manifest", 560)),
      ...[...named, directory, path.join(directory, "artifacts")].map(fsyncDirectory)
    ])
    linkInto(temporary, manifest)
    await fsyncDirectory(directory)
  }

  return {
    run: async (id) => {
      const runDirectory = path.join(runsDirectory, id)
      fs.mkdirSync(runDirectory, { mode: 0o700 })
      linkInto(
        await writeTemporary(path.join(runDirectory, "run.json"), payload("run", 300)),
        path.join(runDirectory, "run.json")
      )
      await Promise.all([fsyncDirectory(runsDirectory), fsyncDirectory(runDirectory)])
      begin.run()
      insertRun.run(id, Date.now())
      insertEvent.run(id, 0, "RunCreated", payload("RunCreated", 120))
      commit.run()
      fs.readFileSync(path.join(runDirectory, "run.json"))
      let seq = append(id, 1, "running", ["RunStarted", "StageStarted"])
      for (let position = 1; position <= stages; position++) {
        await stage(runDirectory, position)
        const last = position === stages
        seq = append(id, seq, last ? "completed" : "running", [
          "ArtifactPublished",
          "StageCompleted",
          last ? "RunCompleted" : "StageStarted"
        ])
      }
    },
    close: () => db.close()
  }
}
