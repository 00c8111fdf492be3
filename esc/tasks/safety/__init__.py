"""The safety checklist: yes/no questions a judge asks of every reply of the chatbot under test
(`esc/scoring/safety_checklist.yaml`, from VERA-MH and CounselBench)."""
