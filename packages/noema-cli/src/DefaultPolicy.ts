/**
 * DefaultPolicy: the Cedar policy every command that reads or writes resources
 * uses when none is named, `$NOEMA_HOME/policy.cedar`.
 *
 * It is written on first use (mode 0600, in a 0700 home) by a command that may
 * write (a command that only reads, `readsOnly`, uses `text` as it is), never overwritten,
 * and grants exactly the actors noema's own commands act as: the local user
 * (`noema resources`, `--as` default `cld:user.cli`) everything; the planner
 * (`noema plan`, `noema tasks list|show`, `cld:assistant.planner`) reads and
 * writes, deleting nothing; the assistants a plan elects (the built-in team
 * and those `--assistants` registers, each acting as its own URN) read, and
 * write tasks and messages. Any other actor is refused. Every access is asked
 * of a policy: allowing everything takes `--engine allow-all`, explicitly.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Effect } from "effect"
import { defaultActor as localUser, plannerActor } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import type { Io } from "./Io.js"

/** Where it is kept, `$NOEMA_HOME/policy.cedar`. */
export const file = (io: Io): string => path.join(CliConfig.paths(io.env).home, "policy.cedar")

/** What is written on first use. */
export const text = `// noema's default policy, written on first use: every access to resources (noema
// resources, noema plan, noema tasks) is asked of it, and what no policy here permits
// is denied. Edit it to change who may do what (Cedar: https://docs.cedarpolicy.com;
// the schema is in docs/resources.md), or name another with --policy FILE.

// You, at this machine: noema resources acts as ${localUser} (unless --as says otherwise).
@id("local-user")
permit (principal == Noema::Actor::"${localUser}", action, resource);

// The planner (noema plan, noema tasks list|show): stores the request, its conversation and
// its tasks, registers the assistants, and reads them back. It deletes nothing.
@id("planner")
permit (
  principal == Noema::Actor::"${plannerActor}",
  action in [Noema::Action::"get", Noema::Action::"put"],
  resource
);

// The assistants noema plan elects (the built-in team and those --assistants registers,
// each acting as its own URN, cld:assistant.<hash>): each reads what its task's context
// needs, and writes tasks (its own state, corrective subtasks) and messages (its output).
@id("assistants-read")
permit (principal, action == Noema::Action::"get", resource)
when { principal.type == "assistant" };

@id("assistants-write-their-work")
permit (principal, action == Noema::Action::"put", resource)
when { principal.type == "assistant" && (resource.type == "task" || resource.type == "message") };
`

/**
 * The default policy's file, written first when it does not exist yet (and said so on
 * stderr). Two commands starting at once write it once: the second finds it there.
 */
export const ensure = (io: Io): Effect.Effect<string, Error> =>
  Effect.try({
    try: () => {
      const target = file(io)
      fs.mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 })
      try {
        fs.writeFileSync(target, text, { mode: 0o600, flag: "wx" })
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "EEXIST") return target
        throw error
      }
      io.stderr.write(
        `noema: wrote the default policy to ${target} (noema policy show prints it; edit it to change who may do what)\n`
      )
      return target
    },
    catch: (error) =>
      new Error(
        `policy: cannot write the default policy to ${file(io)} (${(error as NodeJS.ErrnoException).code ?? String(error)})`
      )
  })
