import { assert, describe, it } from "@effect/vitest"
import * as RoutineConformance from "../src/RoutineConformance.js"
import * as WorkBreakdown from "../src/WorkBreakdown.js"

const markdown = `---
title: Reports
variables:
  - documents.brief
  - name: thread.topic
    required: false
skills:
  report:
    tools: [read_file]
---
# Write reports {#report}
You write reports.

## Quarterly {#quarterly}
Brief: {{documents.brief}}

- [ ] Gather the figures {#gather}
  From the brief.
  Carefully.
- [x] Draft the summary
- [ ] Send it {#send}

## Yearly
- [ ] Collect the quarters
`

const errorOf = (text: string, source: string): WorkBreakdown.WorkBreakdownError => {
  try {
    WorkBreakdown.parse(text, source)
  } catch (error) {
    assert.instanceOf(error, WorkBreakdown.WorkBreakdownError)
    return error as WorkBreakdown.WorkBreakdownError
  }
  assert.fail("parsed")
}

describe("WorkBreakdown", () => {
  it("reads YAML, JSON and Markdown into the same breakdown", () => {
    const yaml = RoutineConformance.breakdown()
    const json = WorkBreakdown.parse(
      JSON.stringify({ title: yaml.title, variables: yaml.variables, skills: yaml.skills }, null, 2),
      "reports.json"
    )
    assert.strictEqual(json.format, "json")
    assert.deepStrictEqual(json.skills, yaml.skills)
    assert.deepStrictEqual(json.variables, yaml.variables)
    assert.deepStrictEqual(yaml.variables, [
      { name: "documents.brief", required: true },
      { name: "stakeholder.owner.name", required: true },
      { name: "thread.topic", required: false }
    ])

    const md = WorkBreakdown.parse(markdown, "reports.md")
    assert.strictEqual(md.format, "markdown")
    assert.strictEqual(md.title, "Reports")
    assert.deepStrictEqual(md.skills, [
      {
        id: "report",
        title: "Write reports",
        preamble: "You write reports.",
        tools: ["read_file"],
        scenarios: [
          {
            id: "quarterly",
            title: "Quarterly",
            preamble: "Brief: {{documents.brief}}",
            tasks: [
              {
                id: "gather",
                title: "Gather the figures",
                instructions: "From the brief.\nCarefully.",
                done: false
              },
              { id: "draft-the-summary", title: "Draft the summary", done: true },
              { id: "send", title: "Send it", done: false }
            ]
          },
          {
            id: "yearly",
            title: "Yearly",
            tasks: [{ id: "collect-the-quarters", title: "Collect the quarters", done: false }]
          }
        ]
      }
    ])
    assert.deepStrictEqual(WorkBreakdown.chains(md).map(WorkBreakdown.chainKey), [
      "report/quarterly",
      "report/yearly"
    ])
  })

  it("names the line of what is wrong, in every format", () => {
    const yamlError = errorOf(
      "skills:\n  - id: report\n    scenarios:\n      - id: q\n        tasks:\n          - id: a\n            title: 5\n",
      "bad.yaml"
    )
    assert.strictEqual(yamlError.line, 7)
    assert.match(yamlError.message, /^bad\.yaml:7: skills\[0\]\.scenarios\[0\]\.tasks\[0\]\.title: /)

    const syntax = errorOf("skills:\n  - id: [\n", "broken.yaml")
    assert.strictEqual(syntax.source, "broken.yaml")
    assert.isNumber(syntax.line)

    const json = errorOf('{\n  "skills": [\n    { "id": "s", "scenarios": [] }\n  ]\n}\n', "bad.json")
    assert.strictEqual(json.line, 3)
    assert.match(json.message, /scenarios/)

    const undeclared = errorOf(
      "skills:\n  - id: s\n    preamble: Hi {{stakeholder.boss}}\n    scenarios:\n      - id: c\n        tasks: [{ id: t, title: T }]\n",
      "vars.yaml"
    )
    assert.strictEqual(undeclared.line, 3)
    assert.match(undeclared.message, /\{\{stakeholder\.boss\}\}, which the document does not declare/)

    const badNamespace = errorOf(
      "variables: [weather.today]\nskills:\n  - id: s\n    scenarios:\n      - id: c\n        tasks: [{ id: t, title: T }]\n",
      "ns.yaml"
    )
    assert.strictEqual(badNamespace.line, 1)

    const orphan = errorOf("# Skill\n- [ ] a task without a scenario\n", "orphan.md")
    assert.strictEqual(orphan.line, 2)
    assert.match(orphan.message, /before any scenario/)

    const emptyScenario = errorOf("---\ntitle: x\n---\n# Skill\n\n## Scenario\nJust text.\n", "empty.md")
    assert.strictEqual(emptyScenario.line, 6)

    const frontMatter = errorOf("---\nvariables: [documents.a\n---\n# S\n## C\n- [ ] t\n", "front.md")
    assert.isAtLeast(frontMatter.line ?? 0, 2)

    const twice = errorOf(
      "skills:\n  - id: s\n    scenarios:\n      - id: c\n        tasks:\n          - { id: t, title: T }\n          - { id: t, title: U }\n",
      "twice.yaml"
    )
    assert.strictEqual(twice.line, 7)
  })

  it("selects goals by chain, skill or scenario, and names the goals when none matches", () => {
    const breakdown = RoutineConformance.breakdown()
    assert.deepStrictEqual(WorkBreakdown.select(breakdown, "report").map(WorkBreakdown.chainKey), [
      "report/quarterly",
      "report/yearly"
    ])
    assert.deepStrictEqual(WorkBreakdown.select(breakdown, "yearly").map(WorkBreakdown.chainKey), [
      "report/yearly"
    ])
    assert.throws(
      () => WorkBreakdown.select(breakdown, "weekly"),
      /no goal "weekly"; goals: report\/quarterly, report\/yearly/
    )
  })

  it("writes progress back as checkboxes, changing nothing else", () => {
    const done = new Set(["report/quarterly gather", "report/yearly collect-the-quarters"])
    const written = WorkBreakdown.withCheckboxes(markdown, (chain, task) => done.has(`${chain} ${task}`))
    assert.strictEqual(
      written,
      markdown
        .replace("- [ ] Gather the figures", "- [x] Gather the figures")
        .replace("- [x] Draft the summary", "- [ ] Draft the summary")
        .replace("- [ ] Collect the quarters", "- [x] Collect the quarters")
    )
    const crlf = markdown.replace(/\n/g, "\r\n")
    assert.strictEqual(
      WorkBreakdown.withCheckboxes(crlf, (chain, task) => done.has(`${chain} ${task}`)),
      written.replace(/\n/g, "\r\n")
    )
  })
})
