// Package config loads and validates the orchestrator's two kinds of configuration: pipeline
// definitions (one YAML file per pipeline, in a directory) and the daemon's own config (a YAML
// file, ORCH_* environment variables and flags). Both are read with koanf; both come back
// fully validated with defaults filled in, or with every problem of the file at once.
//
// # Pipeline files
//
// One pipeline per file; the name defaults to the file's base name. testdata/pipelines/ at the
// top of the repository holds commented samples. The schema:
//
//	name: prod                              # default: file base name; ^[a-z0-9][a-z0-9_-]{0,62}$
//	description: "..."
//	coolify:
//	  url: https://coolify.example.com      # the client appends /api/v1
//	  token: ${COOLIFY_TOKEN}
//	secrets:                                # named secret sources; "env" is built in
//	  vault:
//	    infisical: { url: https://eu.infisical.com, client_id: ..., client_secret: ${...},
//	                 project_id: ..., environment: prod, path: / }
//	services:
//	  - name: api                           # default: the uuid
//	    uuid: abc123                        # Coolify resource UUID, unique in the file
//	    kind: application                   # application (default) | service
//	    image_tag: "${trigger.image_tag}"   # empty: leave the tag alone (required empty for kind service)
//	    env:
//	      - { key: LOG_LEVEL, value: info, is_buildtime: false }
//	      - { key: DATABASE_URL, secret: { source: vault, key: DATABASE_URL } }
//	      - { key: SENTRY_DSN, secret: { source: env, key: SENTRY_DSN } }
//	      - { key: GIT_SHA, value: "${trigger.commit}" }
//	    health:
//	      coolify_status: running:healthy   # exact; "running" matches any running:<health>
//	      status_timeout: 30s               # how long the status may take to match (default: http's timeout, else 30s)
//	      http: { url: https://api.example.com/healthz, expect_status: 200, timeout: 30s }
//	      version:                          # the service must show the version deployed
//	        url: https://api.example.com/version
//	        field: build.tag                # a JSON field of the body; or header: X-Version; neither: the whole body
//	        expect: "${trigger.image_tag}"  # the default
//	        timeout: 30s
//	    deploy_timeout: 10m                 # the wait for one deployment; a stuck one is canceled then
//	    cancel_timeout: 2m                  # how long a deployment of the run's own that will not end is canceled again
//	    wave: 0                             # Phase-2 wave (default 0); or after:
//	  - name: web
//	    uuid: def456
//	    after: [api]                        # deploys in a later wave than api
//	mobile:
//	  - name: version_state                 # default: the feature
//	    flagsmith: { url: https://api.flagsmith.com, api_key: ${FLAGSMITH_KEY}, environment: <env key> }
//	    feature: version_state
//	    when: after_phase2                  # after_phase2 (default) | before_phase1 | after_verified (after the analysis; needs analysis:)
//	    set: { ios.latest_version: "${trigger.app_version}" }
//	    never_downgrade: true
//	locks:
//	  ttl: 10m
//	  phase:   { timeout: 60s, max_retries: 3, backoff: [1s, 2s, 4s] }
//	  service: { timeout: 30s, max_retries: 2 }
//	  on_frozen: wait                       # wait (default) | fail
//	phase2: { parallel: 4 }                 # services of one wave deployed at once (default 1)
//	on_failure: rollback                    # rollback (default: the whole release, Flagsmith too) | rollback-failed | halt
//	concurrency: queue                      # queue (default) | supersede
//	order: build                            # build | created | none; default: build for a numeric build, else none
//	analysis:                               # metric checks after each Phase-2 wave and after the last one
//	  prometheus: { url: http://prometheus:9090 }
//	  on_inconclusive: ask                  # ask (default: a person continues or rolls back) | rollback | continue
//	  inconclusive_timeout: 30m             # ask: nobody deciding within it rolls back
//	  after_mobile: true                    # measure again after the after_verified mobile steps (a failure reverts the flag first)
//	  checks:
//	    - name: errors                      # unique; ^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$
//	      # placeholders, unquoted where a string goes: {{service}} {{uuid}} {{pipeline}} {{run}} {{image_tag}} {{build}};
//	      # a query naming {{service}} or {{uuid}} is measured for each service deployed
//	      query: sum(rate(http_requests_total{service={{service}},version={{image_tag}},code=~"5.."}[1m]))
//	             / sum(rate(http_requests_total{service={{service}},version={{image_tag}}}[1m]))
//	      success: "< 0.01"                 # <, <=, >, >=, ==, != and a number
//	      failure: ">= 0.05"                # optional; without it, not successful is failed
//	      interval: 30s                     # between measurements, the first one interval after the wave (default 30s)
//	      count: 3                          # measurements that decide the check (default 3)
//	      failure_limit: 0                  # failed measurements tolerated (default 0)
//	max_build_ahead: 10000                  # refuse a build further ahead of the newest known (0: off)
//	notify:                                 # default: the daemon's notify block; {targets: []} for none
//	  lock_wait: 2m                         # announce a lock wait this long (default 2m)
//	  targets:
//	    - { name: team, kind: slack, url: ${SLACK_WEBHOOK_URL}, events: [failed, lock_wait] }
//	    - { kind: discord, url: ${DISCORD_WEBHOOK_URL} }     # name defaults to the kind
//	    - { name: audit, kind: webhook, url: https://hooks.example.com/x, secret: ${HOOK_SECRET} }
//	statuses:                               # each run as a Git host deployment (see Statuses)
//	  github: { repo: acme/api, token: ${GITHUB_TOKEN}, environment: production, commit_status: orchestrator/deploy }
//	  gitlab: { project: acme/web, url: https://gitlab.example.com, token: ${GITLAB_TOKEN} }
//
// Env var flags are is_buildtime, is_runtime, is_literal, is_multiline, is_shown_once, and
// comment. An entry that leaves one out keeps the variable's current setting on Coolify; a new
// variable gets Coolify's defaults (is_buildtime and is_runtime true, the rest false).
// allow_shared_refs_from_trigger: true (not sent to Coolify) lets a trigger value reach the
// variable as a Coolify shared-variable reference ({{team.KEY}}, {{project.KEY}},
// {{environment.KEY}}), which Resolve refuses otherwise.
//
// # References
//
// ${NAME} is replaced at load time by getenv(NAME); an unset or empty variable is an error
// naming the file, the field and the variable, never its value. $${ is a literal ${.
// ${trigger.build}, ${trigger.image_tag}, ${trigger.commit}, ${trigger.app_version} and
// ${trigger.params.KEY} are allowed only in services[].image_tag, services[].env[].value,
// services[].health.http.url and mobile[].set values, and are filled per run by
// Pipeline.Resolve. In health.http.url a reference may stand only after the host, in the
// path, query or fragment (a file where one could reach the scheme, host or port is
// refused), and each value is escaped for the part it lands in, so a trigger never chooses
// which host a health check requests. Coolify's own {{...}} references pass through untouched. In the daemon
// config, webhooks.*.rules[].trigger values may use ${payload.a.b}, filled by
// WebhookRule.TriggerFor from a delivery; a rule with rollback: true starts rollbacks (they
// pass the stale-build guard that Order drives).
//
// # Errors
//
// Loaders return Problems: one Problem per thing wrong, each with the file, the field path
// (e.g. services[2].uuid) and what is wrong, printed as "file: field: what is wrong". Unknown
// fields, duplicate service UUIDs, bad durations, enum values, image tags, env keys and lock
// keys outside their namespace are all problems. Values from the environment and secrets never
// appear in a Problem, nor does the file's text: a key that does not look like a field name
// is shown as "(key not shown)", and YAML errors give the line, not what they quote.
//
// Only regular files are read, opened without blocking and checked with fstat first: a FIFO,
// a device or a socket named *.yaml is a problem, never a hang. In a directory (the pipelines
// directory, `validate DIR`) a symbolic link that leads out of the directory is refused
// unread; a file named on its own (--config, -f, `validate FILE`) is followed wherever it
// links.
//
// # Daemon config
//
// testdata/config/orchestrator.yaml (Redis) and orchestrator-embedded.yaml (SQLite) are
// commented samples; see Daemon for the fields and EnvOverrides for the ORCH_* variables.
// Every secret the config holds (tokens, webhook secrets, the Redis URL, env values) is a
// Secret, which prints as "[redacted]" in every form.
//
// # Use
//
//	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
//	config.AddFlags(fs)                                   // --listen, --redis-url, ...
//	d, err := config.LoadDaemon(path, os.Getenv, fs)      // defaults < file < ORCH_* < flags
//	pipelines, err := config.LoadPipelines(d.PipelinesDir, os.Getenv)
//	err = d.CheckRules(pipelines)                         // webhook rules name real pipelines
//	run, err := pipelines["prod"].Resolve(trigger)        // per run: fill ${trigger.…}
//
// Validate does all of this for `orchestrator validate FILE…` and returns the problems.
package config
