/**
 * What tests of the panel share: a real headless Chromium (`@sparticuz/chromium`, which ships
 * the browser in its npm package, driven by `playwright-core`), launched once for a test
 * file's run. Both are the caller's to install (this package has them as dev dependencies).
 */
import type { Browser, Page } from "playwright-core"

/** A headless Chromium, as STACK.md's recipe launches it (root in CI included). */
export const launchChromium = async (): Promise<Browser> => {
  // Before the import: @sparticuz/chromium then unpacks its own libraries and fonts.
  process.env.AWS_LAMBDA_JS_RUNTIME ??= "nodejs24.x"
  const chromium = (await import("@sparticuz/chromium")).default
  const { chromium: playwright } = await import("playwright-core")
  // Not `chromium.args`: its `--single-process` ends the browser when a context closes.
  return playwright.launch({ executablePath: await chromium.executablePath(), args: [], headless: true })
}

const seen = new WeakMap<Page, Array<string>>()

/** The script errors (and console errors, unless `openPanel` was told not to keep them) a page has shown so far. */
export const problemsOf = (page: Page): ReadonlyArray<string> => seen.get(page) ?? []

export interface OpenOptions {
  /** What shows the page is ready. Default: the live feed connected (`#live.on`). */
  readonly ready?: string
  readonly viewport?: { readonly width: number; readonly height: number }
  /** Keep console errors as problems too (a test that provokes refused requests may not). Default true. */
  readonly consoleErrors?: boolean
}

/** The panel at `url` (its tokened address and a hash) in a new page of `browser`, once ready. */
export const openPanel = async (browser: Browser, url: string, options: OpenOptions = {}): Promise<Page> => {
  const page = await browser.newPage({ viewport: options.viewport ?? { width: 1360, height: 900 } })
  const problems: Array<string> = []
  seen.set(page, problems)
  page.on("pageerror", (error) => problems.push(error.message))
  if (options.consoleErrors !== false)
    page.on("console", (message) => {
      if (message.type() === "error") problems.push(message.text())
    })
  await page.goto(url)
  await page.waitForSelector(options.ready ?? "#live.on", { timeout: 30_000 })
  return page
}
