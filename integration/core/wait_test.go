package core

import "time"

func waitSeconds(n int) { time.Sleep(time.Duration(n) * time.Second) }
