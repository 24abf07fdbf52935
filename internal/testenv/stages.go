package testenv

import "fmt"

// FailImageStage is a kwok Stage that makes every running pod whose
// container uses image exit with code 1 (phase Failed), as a crashing
// training script would. Its weight beats pod-complete.
func FailImageStage(image string) string {
	return fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-fail-image-%[2]x
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
      values: ['Running']
    - key: '.spec.containers.[].image'
      operator: 'In'
      values: [%[1]q]
  weight: 10000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        type: Ready
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 1
            finishedAt: {{ $now | Quote }}
            reason: Error
            message: "training script exited with status 1"
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
`, image, hash(image))
}

// hash gives stage names that are stable and unique per image.
func hash(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// CrashLoopStage is a kwok Stage that puts every new pod whose container
// uses image into CrashLoopBackOff after restarts restarts, its last exit
// lastReason ("Error", "OOMKilled"...). With waitingReason
// "ImagePullBackOff" it stands for an image that cannot be pulled.
func CrashLoopStage(image, waitingReason string, restarts int, lastReason string) string {
	return fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-waiting-%[5]x
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
      values: ['Pending']
    - key: '.spec.nodeName'
      operator: 'Exists'
    - key: '.spec.containers.[].image'
      operator: 'In'
      values: [%[1]q]
  weight: 10000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
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
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: %[3]d
        started: false
        state:
          waiting:
            reason: %[2]s
            message: "back-off restarting failed container"
        lastState:
          terminated:
            exitCode: 1
            reason: %[4]s
            finishedAt: {{ $now | Quote }}
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Running
`, image, waitingReason, restarts, lastReason, hash(image+waitingReason))
}
