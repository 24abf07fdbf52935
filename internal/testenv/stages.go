// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// FailImageStage is a kwok Stage that makes every running pod whose
// container uses image exit with code 1 (phase Failed), as a crashing
// training script would. Its weight beats pod-complete.
func FailImageStage(image string) string {
	return failStage(fmt.Sprintf("pod-fail-image-%x", hash(image)), image)
}

// FailLaterStage is FailImageStage after the pods have run for a while,
// as a training script that crashes mid-run does.
func FailLaterStage(image string, after time.Duration) string {
	return delayed(failStage(fmt.Sprintf("pod-fail-later-%x", hash(image)), image), after)
}

// failStage is the stage of FailImageStage, named name.
func failStage(name, image string) string {
	return podStage(name, image, "Running", "", `      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        type: Ready
`+notReady(0, `        state:
          terminated:
            exitCode: 1
            finishedAt: {{ $now | Quote }}
            reason: Error
            message: "training script exited with status 1"
            startedAt: {{ $now | Quote }}
`)+`      phase: Failed
`)
}

// notReady is the containerStatuses of a pod status template: every
// container not ready, restarted restarts times, in states (lines of
// state and lastState, indented eight spaces).
func notReady(restarts int, states string) string {
	return fmt.Sprintf(`      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: %d
        started: false
%s      {{ end }}
`, restarts, states)
}

// CrashLoopStage is a kwok Stage that puts every new pod whose container
// uses image into CrashLoopBackOff after restarts restarts, its last exit
// lastReason ("Error", "OOMKilled"...). With waitingReason
// "ImagePullBackOff" it stands for an image that cannot be pulled.
func CrashLoopStage(image, waitingReason string, restarts int, lastReason string) string {
	scheduled := `    - key: '.spec.nodeName'
      operator: 'Exists'
`
	return podStage(fmt.Sprintf("pod-waiting-%x", hash(image+waitingReason)), image, "Pending", scheduled, fmt.Sprintf(`      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        type: Ready
        reason: ContainersNotReady
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: PodScheduled
%s      phase: Running
`, notReady(restarts, fmt.Sprintf(`        state:
          waiting:
            reason: %s
            message: "back-off restarting failed container"
        lastState:
          terminated:
            exitCode: 1
            reason: %s
            finishedAt: {{ $now | Quote }}
            startedAt: {{ $now | Quote }}
`, waitingReason, lastReason))))
}

// KeepRunningStage is a kwok Stage that keeps every running pod whose
// container uses image running for a day, as a long training run is: its
// weight beats pod-complete, and its next status, after that delay, is the
// same phase.
func KeepRunningStage(image string) string {
	return held(podStage(fmt.Sprintf("pod-keep-running-%x", hash(image)), image, "Running", "", "      phase: Running\n"))
}

// ImagePullFailStages are kwok Stages that keep every pod whose container
// uses image Pending, its containers waiting in ImagePullBackOff, as a
// kubelet keeps a pod whose image cannot be pulled: unlike CrashLoopStage's
// pods these never run, so a Job's pods never complete.
func ImagePullFailStages(image string) []string {
	name := fmt.Sprintf("pod-pull-fail-%x", hash(image))
	statuses := func(op string) string {
		return fmt.Sprintf("    - key: '.spec.nodeName'\n      operator: 'Exists'\n    - key: '.status.containerStatuses'\n      operator: '%s'\n", op)
	}
	return []string{
		podStage(name, image, "Pending", statuses("DoesNotExist"), `      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: PodScheduled
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        type: Ready
        reason: ContainersNotReady
`+notReady(0, `        state:
          waiting:
            reason: ImagePullBackOff
            message: "Back-off pulling image"
`)+`      phase: Pending
`),
		held(podStage(name+"-hold", image, "Pending", statuses("Exists"), "      phase: Pending\n")),
	}
}

// held delays a stage from podStage by a day: the pods it matches stay as
// they are.
func held(stage string) string { return delayed(stage, 24*time.Hour) }

// delayed delays a stage from podStage by d.
func delayed(stage string, d time.Duration) string {
	return strings.Replace(stage, "  weight: 10000\n", fmt.Sprintf("  weight: 10000\n  delay:\n    durationMilliseconds: %d\n", d.Milliseconds()), 1)
}

// podStage is a kwok Stage, named name, for the live pods in phase (and
// matching the further selector lines more) whose container uses image:
// it gives them status, a statusTemplate body indented six spaces that
// may use $now. Its weight beats kwok's own pod stages.
func podStage(name, image, phase, more, status string) string {
	return fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: %s
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: [%q]
%s    - key: '.spec.containers.[].image'
      operator: 'In'
      values: [%q]
  weight: 10000
  next:
    statusTemplate: |
      {{ $now := Now }}
%s`, name, phase, more, image, status)
}

// hash gives stage names that are stable and unique per image.
func hash(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
