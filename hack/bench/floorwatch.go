// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// floorWatch is BENCH_FLOOR_WATCH=1: the floor applies while a watch of
// every PyJob is open, started as an informer starts one (a list, then a
// watch from its resourceVersion with bookmarks), to tell what the watch
// that trainops's cache keeps costs a burst of applies. It returns what
// stops the watch and says how many events it saw; nil when not asked.
func floorWatch(ctx context.Context, cfg *rest.Config) (stop func(), err error) {
	if os.Getenv("BENCH_FLOOR_WATCH") != "1" {
		return nil, nil
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := dc.Resource(schema.GroupVersionResource{Group: "training.trainops.dev", Version: "v1alpha1", Resource: "pyjobs"})
	list, err := r.List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	w, err := r.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), AllowWatchBookmarks: true})
	if err != nil {
		cancel()
		return nil, err
	}
	events := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range w.ResultChan() {
			events++
		}
	}()
	return func() {
		cancel()
		w.Stop()
		<-done
		say("    floor: a PyJob watch was open, and saw %d events", events)
	}, nil
}
