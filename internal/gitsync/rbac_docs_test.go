// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/trainops/trainops/internal/install"
	"github.com/trainops/trainops/internal/testenv"
)

// rbacRow is one row of a table of docs/reliability.md: group, resource
// (with a resource name in parentheses), verbs, and, in the table of what
// trainops may not do, the namespace asked about.
type rbacRow struct {
	group, resource, name, namespace string
	verbs                            []string
}

// docRows reads the table after marker in docs/reliability.md.
func docRows(t *testing.T, marker string) []rbacRow {
	t.Helper()
	raw, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), marker)
	if !ok {
		t.Fatalf("docs/reliability.md has no %s", marker)
	}
	table, _, _ = strings.Cut(table, "<!-- rbac:end -->")
	var rows []rbacRow
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "API group" {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		r := rbacRow{group: cells[0], resource: cells[1]}
		if r.group == "core" {
			r.group = ""
		}
		if res, name, ok := strings.Cut(r.resource, " ("); ok {
			r.resource, r.name = res, strings.TrimSuffix(name, ")")
		}
		for _, v := range strings.Split(cells[2], ",") {
			r.verbs = append(r.verbs, strings.TrimSpace(v))
		}
		if marker == "<!-- rbac:denied -->" {
			r.namespace = cells[3]
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatalf("the table after %s is empty", marker)
	}
	return rows
}

// allowedAs asks the API server whether user may verb what r names.
func allowedAs(t *testing.T, user string, groups []string, r rbacRow, verb string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(r.resource, "/")
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: r.group, Resource: res, Subresource: sub, Name: r.name, Namespace: r.namespace, Verb: verb}}}
	if err := k8s.Create(t.Context(), review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// TestTrainopsPowerIsWhatTheDocsSay holds docs/reliability.md's list of
// what trainops may do to its ClusterRole as installed, both ways: every
// rule is listed and every listed verb is a rule; acting as a
// ServiceAccount bound to it, each listed verb is allowed and each row of
// what it may not do is denied.
func TestTrainopsPowerIsWhatTheDocsSay(t *testing.T) {
	role, err := install.ClusterRole("trainops-manager")
	if err != nil {
		t.Fatal(err)
	}
	key := func(group, resource, name, verb string) string {
		return group + "|" + resource + "|" + name + "|" + verb
	}
	var granted []string
	for _, rule := range role.Rules {
		names := rule.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, n := range names {
					for _, v := range rule.Verbs {
						granted = append(granted, key(g, res, n, v))
					}
				}
			}
		}
	}
	allowed := docRows(t, "<!-- rbac:allowed -->")
	var documented []string
	for _, r := range allowed {
		for _, v := range r.verbs {
			documented = append(documented, key(r.group, r.resource, r.name, v))
		}
	}
	slices.Sort(granted)
	slices.Sort(documented)
	for _, g := range granted {
		if !slices.Contains(documented, g) {
			t.Errorf("trainops's ClusterRole grants %s, which docs/reliability.md does not list", g)
		}
	}
	for _, d := range documented {
		if !slices.Contains(granted, d) {
			t.Errorf("docs/reliability.md lists %s, which trainops's ClusterRole does not grant", d)
		}
	}

	home := testenv.NewNamespace(t, k8s)
	user, groups := asTrainops(t, home)
	testenv.Eventually(t, 10*time.Second, func() error { // RBAC caches settle
		if !allowedAs(t, user, groups, allowed[0], allowed[0].verbs[0]) {
			return errors.New("the binding to trainops's ClusterRole is not in effect yet")
		}
		return nil
	})
	for _, r := range allowed {
		for _, v := range r.verbs {
			if !allowedAs(t, user, groups, r, v) {
				t.Errorf("acting as trainops, %s on %s %s %s is denied", v, r.group, r.resource, r.name)
			}
		}
	}
	for _, r := range docRows(t, "<!-- rbac:denied -->") {
		for _, v := range r.verbs {
			if allowedAs(t, user, groups, r, v) {
				t.Errorf("acting as trainops, %s on %s %s in %q is allowed; docs/reliability.md says it is not", v, r.group, r.resource, r.namespace)
			}
		}
	}
}
