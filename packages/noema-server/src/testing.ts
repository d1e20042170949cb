/**
 * What tests of the panel share: a real headless Chromium (`@sparticuz/chromium`, which ships
 * the browser in its npm package, driven by `playwright-core`), launched once for a test
 * file's run. Both are the caller's to install (this package has them as dev dependencies).
 */
import type { Browser } from "playwright-core"

/** A headless Chromium, as STACK.md's recipe launches it (root in CI included). */
export const launchChromium = async (): Promise<Browser> => {
  // Before the import: @sparticuz/chromium then unpacks its own libraries and fonts.
  process.env.AWS_LAMBDA_JS_RUNTIME ??= "nodejs24.x"
  const chromium = (await import("@sparticuz/chromium")).default
  const { chromium: playwright } = await import("playwright-core")
  // Not `chromium.args`: its `--single-process` ends the browser when a context closes.
  return playwright.launch({ executablePath: await chromium.executablePath(), args: [], headless: true })
}
