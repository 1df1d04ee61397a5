package config_test

import (
	"fmt"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
)

func Example() {
	getenv := func(name string) string {
		return map[string]string{"COOLIFY_TOKEN": "1|not-shown"}[name]
	}
	p, err := config.LoadPipelineBytes("pipelines/prod.yaml", []byte(`
coolify: { url: https://coolify.example.com, token: "${COOLIFY_TOKEN}" }
services:
  - name: api
    uuid: x2k9m4n7b1v5c8z3q6w0e4r7
    image_tag: "${trigger.image_tag}"
    env:
      - { key: GIT_SHA, value: "${trigger.commit}", is_buildtime: false }
`), getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	run, err := p.Resolve(orchestrator.Trigger{Build: "1234", ImageTag: "v1.4.0", Commit: "0a1b2c3"})
	if err != nil {
		fmt.Println(err)
		return
	}
	api := run.Services[0]
	fmt.Println(run.Name, api.Name, api.ImageTag, api.LockKey(), api.Env[0].Value.Reveal())
	fmt.Println("token:", run.Coolify.Token, "locks:", run.LockKeys())
	// Output:
	// prod api v1.4.0 coolify:x2k9m4n7b1v5c8z3q6w0e4r7 0a1b2c3
	// token: [redacted] locks: [coolify:phase1 coolify:phase2 coolify:x2k9m4n7b1v5c8z3q6w0e4r7]
}

func ExampleValidate() {
	getenv := func(string) string { return "" }
	for _, line := range config.Validate(getenv, "testdata/bad-pipeline.yaml").Lines() {
		fmt.Println(line)
	}
	// Output:
	// testdata/bad-pipeline.yaml: coolify.token: environment variable COOLIFY_TOKEN is not set
	// testdata/bad-pipeline.yaml: services[1].uuid: duplicate service UUID "abc123" (also services[0].uuid)
	// testdata/bad-pipeline.yaml: services[1].env[0].key: "1DB" is not a valid env key (Coolify rule ^[A-Za-z_][A-Za-z0-9_.]*$, at most 255 characters)
	// testdata/bad-pipeline.yaml: services[1].timeout: unknown field (known here: after, cancel_timeout, deploy_timeout, env, health, image_tag, kind, name, uuid, wave)
	// testdata/bad-pipeline.yaml: locks.ttl: invalid duration (write a number with a unit, e.g. 30s or 10m)
}
