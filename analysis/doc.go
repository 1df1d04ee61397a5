// Package analysis verifies a release after it serves: PromQL checks against Prometheus (its
// HTTP query API, through the official client), each measured every interval, count times,
// against a success condition and an optional failure condition.
//
// A check's query is a template. Its placeholders ({{service}}, {{uuid}}, {{pipeline}},
// {{run}}, {{image_tag}}, {{build}}) stand where a PromQL string literal may stand, written
// without quotes (`version={{image_tag}}`): Render puts each value in as a double-quoted
// PromQL string, escaped, so a value (a trigger's image tag or build) can never end the
// literal and add PromQL of its own. A placeholder is refused after a regular-expression
// matcher (=~, !~), where its value would be read as a pattern.
//
// A measurement is successful when the success condition holds, failed when the failure
// condition holds (without a failure condition: when the success condition does not), and
// inconclusive when the query returns no data, an error, or (with both conditions) neither
// holds. A check fails as soon as more than FailureLimit measurements failed, and succeeds
// when, after Count measurements, at most FailureLimit of them were not successful;
// otherwise it is inconclusive. Run measures several checks at once: one failed check fails
// the analysis and stops the others, any inconclusive one makes it inconclusive.
package analysis
