// SPDX-License-Identifier: Apache-2.0

package realnode

import "k8s.io/apimachinery/pkg/api/resource"

func resourceOne() resource.Quantity { return resource.MustParse("1") }
