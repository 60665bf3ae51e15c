package main

import "os"

// workerCommand is how the node starts its plugin workers: its own binary
// with the hidden plugin-worker argument (main serves as a worker when the
// node's WorkerEnv is set; the argument names the process in ps).
func workerCommand() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil // plugins falls back to os.Executable itself and reports
	}
	return []string{exe, "plugin-worker"}
}
