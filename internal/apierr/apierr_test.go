// SPDX-License-Identifier: Apache-2.0

package apierr

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestMessage(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "training.trainops.dev", Kind: "PyJob"}, "bert", nil)
	if got := Message(fmt.Errorf("apply: %w", invalid)); got != invalid.Status().Message {
		t.Errorf("wrapped API error: %q, want the server's message %q", got, invalid.Status().Message)
	}
	if got := Message(errors.New("dial tcp: refused")); got != "dial tcp: refused" {
		t.Errorf("plain error: %q", got)
	}
}
