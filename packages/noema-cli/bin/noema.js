#!/usr/bin/env node
// The installed `noema` command. It is committed (not built) because npm links
// a package's bins at install time, before `dist/` exists on a fresh clone.
import "../dist/bin.js"
