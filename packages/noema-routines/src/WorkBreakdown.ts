/**
 * WorkBreakdown: skills, their scenarios and the scenarios' tasks, read from a
 * document (YAML, JSON, or Markdown with front matter and checkbox task lists).
 *
 * Every format is parsed into the same plain value, which is validated with
 * one Schema; an error names the file and the line of what is wrong. A
 * preamble or task may use only variables the document declares
 * (`{{documents.brief}}`, `{{message.last}}`, `{{thread.topic}}`,
 * `{{stakeholder.owner.name}}`); an undeclared one is an error at load time.
 */
import { Schema } from "effect"
import { isMap, isSeq, LineCounter, parseDocument } from "yaml"

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

export const Namespace = Schema.Literals(["documents", "message", "thread", "stakeholder"])
export type Namespace = typeof Namespace.Type
export const namespaces: ReadonlyArray<Namespace> = ["documents", "message", "thread", "stakeholder"]

const Id = Schema.String.check(Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/))
const Names = Schema.Array(Schema.String)

export const VariableDeclaration = Schema.Struct({
  /** `namespace.path`, e.g. `documents.brief`. */
  name: Schema.String.check(Schema.isPattern(/^(documents|message|thread|stakeholder)\.[A-Za-z0-9_.-]+$/)),
  /** Default true: a required variable that no source gives stops the setup. */
  required: Schema.optionalKey(Schema.Boolean),
  description: Schema.optionalKey(Schema.String)
})
export type VariableDeclaration = typeof VariableDeclaration.Type

export const Task = Schema.Struct({
  id: Id,
  title: Schema.String,
  instructions: Schema.optionalKey(Schema.String),
  /** Tools (by name) this task may use, beside the skill's and the scenario's. */
  tools: Schema.optionalKey(Names),
  /** As written in the document (Markdown `- [x]`); the store's record is what counts. */
  done: Schema.optionalKey(Schema.Boolean)
})
export type Task = typeof Task.Type

export const Scenario = Schema.Struct({
  id: Id,
  title: Schema.optionalKey(Schema.String),
  preamble: Schema.optionalKey(Schema.String),
  tools: Schema.optionalKey(Names),
  tasks: Schema.Array(Task).check(Schema.isMinLength(1))
})
export type Scenario = typeof Scenario.Type

export const Skill = Schema.Struct({
  id: Id,
  title: Schema.optionalKey(Schema.String),
  preamble: Schema.optionalKey(Schema.String),
  /** Put in front of every request of this skill's chains (the chain's own prompt). */
  system: Schema.optionalKey(Schema.String),
  tools: Schema.optionalKey(Names),
  scenarios: Schema.Array(Scenario).check(Schema.isMinLength(1))
})
export type Skill = typeof Skill.Type

export const Document = Schema.Struct({
  title: Schema.optionalKey(Schema.String),
  variables: Schema.optionalKey(Schema.Array(Schema.Union([Schema.String, VariableDeclaration]))),
  skills: Schema.Array(Skill).check(Schema.isMinLength(1))
})
export type DocumentInput = typeof Document.Type

export type Format = "yaml" | "json" | "markdown"

/** A validated breakdown, with its variables normalised. */
export interface WorkBreakdown {
  /** Where it came from, for messages (a path). */
  readonly source: string
  readonly format: Format
  readonly title: string | undefined
  readonly variables: ReadonlyArray<{ readonly name: string; readonly required: boolean }>
  readonly skills: ReadonlyArray<Skill>
}

/** One goal chain: a skill, one of its scenarios, and that scenario's tasks. */
export interface GoalChain {
  readonly skill: Skill
  readonly scenario: Scenario
}

/** `skill/scenario`: how stores and messages name a chain. */
export const chainKey = (chain: {
  readonly skill: { readonly id: string }
  readonly scenario: { readonly id: string }
}) => `${chain.skill.id}/${chain.scenario.id}`

export class WorkBreakdownError extends Schema.TaggedError<WorkBreakdownError>()("WorkBreakdownError", {
  source: Schema.String,
  line: Schema.optionalKey(Schema.Number),
  detail: Schema.String
}) {
  override get message(): string {
    return `${this.source}${this.line === undefined ? "" : `:${this.line}`}: ${this.detail}`
  }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/** The format a file name suggests (`.md`, `.json`, anything else YAML). */
export const formatOf = (source: string): Format =>
  /\.(md|markdown)$/i.test(source) ? "markdown" : /\.json$/i.test(source) ? "json" : "yaml"

type Locate = (path: ReadonlyArray<PropertyKey>) => number | undefined

/** Parses and validates `text`; throws `WorkBreakdownError` (with a line when one is known). */
export const parse = (text: string, source: string, format: Format = formatOf(source)): WorkBreakdown => {
  const { value, locate } = format === "markdown" ? parseMarkdown(text, source) : parseYaml(text, source, 0)
  return validate(value, locate, source, format)
}

const parseYaml = (text: string, source: string, lineOffset: number): { value: unknown; locate: Locate } => {
  const lineCounter = new LineCounter()
  // JSON is read by the YAML parser too: it keeps positions, which JSON.parse does not.
  const document = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true })
  const first = document.errors[0]
  if (first !== undefined) {
    const line = lineCounter.linePos(first.pos[0]).line + lineOffset
    throw new WorkBreakdownError({ source, line, detail: first.message.split("\n")[0] ?? first.message })
  }
  const locate: Locate = (path) => {
    for (let length = path.length; length >= 0; length--) {
      const node = document.getIn(path.slice(0, length), true) as
        | { range?: [number, number, number] }
        | undefined
      if (node !== undefined && node !== null && typeof node === "object" && node.range !== undefined) {
        return lineCounter.linePos(node.range[0]).line + lineOffset
      }
      if (length === 0 && (isMap(document.contents) || isSeq(document.contents))) {
        return lineCounter.linePos(document.contents.range?.[0] ?? 0).line + lineOffset
      }
    }
    return undefined
  }
  return { value: document.toJS(), locate }
}

const pathText = (path: ReadonlyArray<PropertyKey>): string =>
  path
    .map((key) => (typeof key === "number" ? `[${key}]` : `.${String(key)}`))
    .join("")
    .replace(/^\./, "")

const standard = Schema.toStandardSchemaV1(Document)

const validate = (value: unknown, locate: Locate, source: string, format: Format): WorkBreakdown => {
  const result = standard["~standard"].validate(value)
  if (result instanceof Promise) throw new TypeError("unexpected asynchronous validation")
  if (result.issues !== undefined) {
    const issue = result.issues[0]!
    const path = (issue.path ?? []).map((segment) =>
      typeof segment === "object" && segment !== null && "key" in segment ? segment.key : segment
    ) as ReadonlyArray<PropertyKey>
    const line = locate(path)
    const where = path.length === 0 ? "" : `${pathText(path)}: `
    return fail(source, line, `${where}${issue.message}`)
  }
  const input = result.value
  const variables = (input.variables ?? []).map((declaration) =>
    typeof declaration === "string"
      ? { name: declaration, required: true }
      : { name: declaration.name, required: declaration.required ?? true }
  )
  variables.forEach((variable, index) => {
    if (!/^(documents|message|thread|stakeholder)\.[A-Za-z0-9_.-]+$/.test(variable.name)) {
      fail(
        source,
        locate(["variables", index]),
        `variables[${index}]: "${variable.name}" is not namespace.name (namespaces: ${namespaces.join(", ")})`
      )
    }
  })
  const declared = new Set(variables.map((variable) => variable.name))
  const seen = new Set<string>()
  input.skills.forEach((skill, s) => {
    if (seen.has(skill.id)) fail(source, locate(["skills", s, "id"]), `skill "${skill.id}" is defined twice`)
    seen.add(skill.id)
    checkTemplate(
      skill.preamble,
      declared,
      source,
      locate(["skills", s, "preamble"]),
      `skills[${s}].preamble`
    )
    checkTemplate(skill.system, declared, source, locate(["skills", s, "system"]), `skills[${s}].system`)
    const scenarios = new Set<string>()
    skill.scenarios.forEach((scenario, c) => {
      const at = ["skills", s, "scenarios", c] as const
      if (scenarios.has(scenario.id))
        fail(
          source,
          locate([...at, "id"]),
          `scenario "${scenario.id}" is defined twice in skill "${skill.id}"`
        )
      scenarios.add(scenario.id)
      checkTemplate(
        scenario.preamble,
        declared,
        source,
        locate([...at, "preamble"]),
        `${pathText(at)}.preamble`
      )
      const tasks = new Set<string>()
      scenario.tasks.forEach((task, t) => {
        const taskAt = [...at, "tasks", t] as const
        if (tasks.has(task.id))
          fail(
            source,
            locate([...taskAt, "id"]),
            `task "${task.id}" is defined twice in scenario "${scenario.id}"`
          )
        tasks.add(task.id)
        checkTemplate(task.title, declared, source, locate([...taskAt, "title"]), `${pathText(taskAt)}.title`)
        checkTemplate(
          task.instructions,
          declared,
          source,
          locate([...taskAt, "instructions"]),
          `${pathText(taskAt)}.instructions`
        )
      })
    })
  })
  return { source, format, title: input.title, variables, skills: input.skills }
}

const fail = (source: string, line: number | undefined, detail: string): never => {
  throw line === undefined
    ? new WorkBreakdownError({ source, detail })
    : new WorkBreakdownError({ source, line, detail })
}

/** `{{ namespace.path }}` */
export const placeholder = /\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g

/** The variables a text refers to, in order of first use. */
export const references = (text: string | undefined): ReadonlyArray<string> => {
  if (text === undefined) return []
  const names: Array<string> = []
  for (const match of text.matchAll(placeholder)) if (!names.includes(match[1]!)) names.push(match[1]!)
  return names
}

const checkTemplate = (
  text: string | undefined,
  declared: ReadonlySet<string>,
  source: string,
  line: number | undefined,
  where: string
) => {
  for (const name of references(text)) {
    if (!declared.has(name)) {
      fail(source, line, `${where} uses {{${name}}}, which the document does not declare under "variables"`)
    }
  }
}

// ---------------------------------------------------------------------------
// Markdown
// ---------------------------------------------------------------------------

/**
 * Markdown form:
 *
 * ```markdown
 * ---
 * title: Quarterly report
 * variables: [documents.brief, stakeholder.owner.name]
 * ---
 * # Write reports {#report}
 * The skill's preamble: every paragraph under the heading.
 *
 * ## Quarterly {#quarterly}
 * The scenario's preamble.
 *
 * - [ ] Gather the figures {#gather}
 *   Indented lines under a task are its instructions.
 * - [x] Draft the summary {#draft}
 * ```
 *
 * A `#` heading is a skill, `##` a scenario, a checkbox item a task; `{#id}` gives
 * an id (otherwise the title's slug). Front matter may also hold `tools` and
 * `system` per skill under `skills: { <id>: { tools, system } }`, and scenario
 * tools under `scenarios: { <skill>/<scenario>: { tools } }`.
 */
const headingPattern = /^(#{1,2})\s+(.*?)\s*$/
const taskPattern = /^[-*]\s+\[( |x|X)\]\s+(.*?)\s*$/
const idPattern = /\s*\{#([^}\s]+)\}\s*$/

export const slug = (title: string): string =>
  title
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "") || "item"

const titleAndId = (text: string): { title: string; id: string } => {
  const match = idPattern.exec(text)
  const title = match === null ? text : text.slice(0, match.index).trim()
  return { title, id: match === null ? slug(title) : match[1]! }
}

interface MarkdownTask {
  id: string
  title: string
  instructions: Array<string>
  done: boolean
  line: number
}
interface MarkdownScenario {
  id: string
  title: string
  preamble: Array<string>
  tasks: Array<MarkdownTask>
  line: number
}
interface MarkdownSkill {
  id: string
  title: string
  preamble: Array<string>
  scenarios: Array<MarkdownScenario>
  line: number
}

const frontMatter = (lines: ReadonlyArray<string>): { end: number } | undefined => {
  if (lines[0]?.trim() !== "---") return undefined
  for (let index = 1; index < lines.length; index++) if (lines[index]!.trim() === "---") return { end: index }
  return undefined
}

const parseMarkdown = (text: string, source: string): { value: unknown; locate: Locate } => {
  const lines = text.split(/\r?\n/)
  const front = frontMatter(lines)
  let meta: Record<string, unknown> = {}
  let metaLocate: Locate = () => undefined
  if (lines[0]?.trim() === "---" && front === undefined)
    fail(source, 1, "front matter is not closed by a --- line")
  if (front !== undefined) {
    const parsed = parseYaml(lines.slice(1, front.end).join("\n"), source, 1)
    if (parsed.value !== null && parsed.value !== undefined) {
      if (typeof parsed.value !== "object" || Array.isArray(parsed.value))
        fail(source, 2, "front matter is not a mapping")
      meta = parsed.value as Record<string, unknown>
    }
    metaLocate = parsed.locate
  }
  const skills: Array<MarkdownSkill> = []
  let inTask: MarkdownTask | undefined
  for (let index = front === undefined ? 0 : front.end + 1; index < lines.length; index++) {
    const line = lines[index]!
    const lineNumber = index + 1
    const heading = headingPattern.exec(line)
    if (heading !== null) {
      inTask = undefined
      const { title, id } = titleAndId(heading[2]!)
      if (heading[1] === "#") {
        skills.push({ id, title, preamble: [], scenarios: [], line: lineNumber })
      } else {
        const skill = skills.at(-1)
        if (skill === undefined)
          fail(source, lineNumber, `scenario "${title}" comes before any skill (# heading)`)
        skill!.scenarios.push({ id, title, preamble: [], tasks: [], line: lineNumber })
      }
      continue
    }
    const task = taskPattern.exec(line)
    if (task !== null) {
      const scenario = skills.at(-1)?.scenarios.at(-1)
      if (scenario === undefined)
        fail(source, lineNumber, `task "${task[2]}" comes before any scenario (## heading)`)
      const { title, id } = titleAndId(task[2]!)
      inTask = { id, title, instructions: [], done: task[1] !== " ", line: lineNumber }
      scenario!.tasks.push(inTask)
      continue
    }
    if (inTask !== undefined && (/^\s+\S/.test(line) || line.trim() === "")) {
      inTask.instructions.push(line.trim())
      continue
    }
    inTask = undefined
    const skill = skills.at(-1)
    if (skill === undefined) {
      if (line.trim() !== "") fail(source, lineNumber, "text before the first skill (# heading)")
      continue
    }
    const scenario = skill.scenarios.at(-1)
    if (scenario !== undefined) {
      if (scenario.tasks.length > 0 && line.trim() !== "") {
        fail(
          source,
          lineNumber,
          `text after the tasks of scenario "${scenario.id}" (tasks are "- [ ] title" items)`
        )
      }
      scenario.preamble.push(line)
    } else {
      skill.preamble.push(line)
    }
  }
  const paragraph = (lines: ReadonlyArray<string>): string | undefined => {
    const joined = lines.join("\n").trim()
    return joined === "" ? undefined : joined
  }
  const skillMeta = (meta.skills ?? {}) as Record<string, Record<string, unknown>>
  const scenarioMeta = (meta.scenarios ?? {}) as Record<string, Record<string, unknown>>
  const value = {
    ...(meta.title === undefined ? {} : { title: meta.title }),
    ...(meta.variables === undefined ? {} : { variables: meta.variables }),
    skills: skills.map((skill) => ({
      id: skill.id,
      title: skill.title,
      ...optional("preamble", paragraph(skill.preamble)),
      ...optional("system", skillMeta[skill.id]?.system),
      ...optional("tools", skillMeta[skill.id]?.tools),
      scenarios: skill.scenarios.map((scenario) => ({
        id: scenario.id,
        title: scenario.title,
        ...optional("preamble", paragraph(scenario.preamble)),
        ...optional("tools", scenarioMeta[`${skill.id}/${scenario.id}`]?.tools),
        tasks: scenario.tasks.map((task) => ({
          id: task.id,
          title: task.title,
          ...optional("instructions", paragraph(task.instructions)),
          done: task.done
        }))
      }))
    }))
  }
  const locate: Locate = (path) => {
    const [first, s, second, c, third, t] = path
    if (first === "title" || first === "variables") return metaLocate(path)
    if (first !== "skills" || typeof s !== "number") return 1
    const skill = skills[s]
    if (skill === undefined) return 1
    if (second !== "scenarios" || typeof c !== "number") return skill.line
    const scenario = skill.scenarios[c]
    if (scenario === undefined) return skill.line
    if (third !== "tasks" || typeof t !== "number") return scenario.line
    return scenario.tasks[t]?.line ?? scenario.line
  }
  return { value, locate }
}

const optional = (key: string, value: unknown): Record<string, unknown> =>
  value === undefined ? {} : { [key]: value }

// ---------------------------------------------------------------------------
// Queries and progress
// ---------------------------------------------------------------------------

/** Every chain of the breakdown, in document order. */
export const chains = (breakdown: WorkBreakdown): ReadonlyArray<GoalChain> =>
  breakdown.skills.flatMap((skill) => skill.scenarios.map((scenario) => ({ skill, scenario })))

/**
 * The chains a goal names: `skill/scenario`, a scenario id (unique in the
 * document) or a skill id (all its scenarios). Throws naming what exists.
 */
export const select = (breakdown: WorkBreakdown, goal: string | undefined): ReadonlyArray<GoalChain> => {
  const all = chains(breakdown)
  if (goal === undefined) return all
  const exact = all.filter((chain) => chainKey(chain) === goal)
  if (exact.length > 0) return exact
  const bySkill = all.filter((chain) => chain.skill.id === goal)
  if (bySkill.length > 0) return bySkill
  const byScenario = all.filter((chain) => chain.scenario.id === goal)
  if (byScenario.length === 1) return byScenario
  if (byScenario.length > 1) {
    throw new WorkBreakdownError({
      source: breakdown.source,
      detail: `goal "${goal}" names scenarios of several skills: ${byScenario.map(chainKey).join(", ")}`
    })
  }
  throw new WorkBreakdownError({
    source: breakdown.source,
    detail: `no goal "${goal}"; goals: ${all.map(chainKey).join(", ")}`
  })
}

/**
 * The Markdown document with each task's checkbox set from `done(chainKey, taskId)`;
 * nothing else changes (line endings, spacing, everything the parser ignores).
 */
export const withCheckboxes = (text: string, done: (chain: string, task: string) => boolean): string => {
  const lines = text.split(/(?<=\n)/)
  const front = frontMatter(text.split(/\r?\n/))
  let skill: string | undefined
  let scenario: string | undefined
  return lines
    .map((line, index) => {
      if (front !== undefined && index <= front.end) return line
      const body = line.replace(/\r?\n$/, "")
      const heading = headingPattern.exec(body)
      if (heading !== null) {
        if (heading[1] === "#") {
          skill = titleAndId(heading[2]!).id
          scenario = undefined
        } else scenario = titleAndId(heading[2]!).id
        return line
      }
      const task = taskPattern.exec(body)
      if (task === null || skill === undefined || scenario === undefined) return line
      const mark = done(`${skill}/${scenario}`, titleAndId(task[2]!).id) ? "x" : " "
      return line.replace(/\[( |x|X)\]/, `[${mark}]`)
    })
    .join("")
}
