#!/usr/bin/env node
// The installed `noema` command. It is committed (not built) because npm links
// a package's bins at install time, before `dist/` exists on a fresh clone.
//
// It checks the Node version before loading anything else: on an older Node the
// first import would fail with "No such built-in module: node:sqlite", which
// names neither noema nor the fix. (A static import would be evaluated before
// this check, hence the dynamic one.)
import module from "node:module"

const [major = 0, minor = 0] = process.versions.node.split(".").map(Number)
if (major < 22 || (major === 22 && minor < 13)) {
  process.stderr.write(
    `noema: needs Node.js 22.13 or later (for node:sqlite); this is Node ${process.versions.node}. ` +
      "In the noema repository, `npx noema` runs it on the repository's own Node 24.\n"
  )
  process.exit(1)
}
// V8's compile cache (Node 22.1+; in the OS's temporary directory unless NODE_COMPILE_CACHE
// names another) keeps the compiled code of the modules every start loads, the command tree
// and effect/cli above all: a start after the first skips most of their compiling.
module.enableCompileCache?.()
await import("../dist/bin.js")
