// SPDX-License-Identifier: Apache-2.0

// Package apierr reads the API server's own words out of a failed request.
package apierr

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Message is the API server's message for a failed request (it names the
// object and the field), or err's text when the error did not come from
// the API server.
func Message(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}
	return err.Error()
}
