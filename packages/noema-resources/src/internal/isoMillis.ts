/**
 * `new Date(millis).toISOString()` with the last answer remembered: a planner run's events and
 * puts fall in the same millisecond by the dozen, and each formatted its own Date.
 */
let lastMillis = Number.NaN
let lastIso = ""

export const isoOfMillis = (millis: number): string => {
  if (millis === lastMillis) return lastIso
  // Throws for a time out of Date's range, as before, and remembers nothing then.
  const iso = new Date(millis).toISOString()
  lastMillis = millis
  lastIso = iso
  return iso
}
