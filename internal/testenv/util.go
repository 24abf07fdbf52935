// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// httpOK checks a plain-HTTP health endpoint on 127.0.0.1.
func httpOK(url string) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
