"""The safety checklist: yes/no questions a judge asks of every reply of the chatbot under test
(`checklist.yaml`, from VERA-MH and CounselBench)."""
