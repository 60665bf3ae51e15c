package tdx

// The per-quote steps of go-tdx-guest's verification (verify/verify.go at
// the version in go.mod: verifyEvidence's TEE type check, verifyQuote,
// verifyTdQuoteBody, verifyQeReport and SupportedTcbLevelsFromCollateral's
// level matching), run when the PCK chain and the collateral come from a
// Cache entry the library verified. They are the library's code, with its
// error texts, so a cached verification names the same check and says the
// same as the library would (TestCachedMatchesUncached compares them).

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"

	"github.com/google/go-tdx-guest/abi"
	"github.com/google/go-tdx-guest/pcs"
	pb "github.com/google/go-tdx-guest/proto/tdx"
	"github.com/google/go-tdx-guest/verify"
)

// checkQuote is the library's verification of a quote whose PCK chain and
// collateral are e's.
func checkQuote(quote any, e *verifiedEntry) error {
	if err := abi.CheckQuote(quote); err != nil {
		return fmt.Errorf("quote invalid: %v", err)
	}
	header, ok := quote.(interface{ GetHeader() *pb.Header })
	if !ok {
		return fmt.Errorf("unsupported quote type: %T", quote)
	}
	if header.GetHeader().GetTeeType() != abi.TeeTDX {
		return abi.ErrTeeType
	}
	sd, ok := quote.(interface {
		GetSignedData() *pb.Ecdsa256BitQuoteV4AuthData
	})
	if !ok {
		return fmt.Errorf("unsupported quote type: %T", quote)
	}
	signedData := sd.GetSignedData()
	attestPublicKey, err := bytesToEcdsaPubKey(signedData.GetEcdsaAttestationKey())
	if err != nil {
		return fmt.Errorf("attestation key in the quote is invalid: %v", err)
	}
	signature, err := abi.SignatureToDER(signedData.GetSignature())
	if err != nil {
		return fmt.Errorf("unable to convert Quote's signature to DER format: %v", err)
	}
	message, err := headerAndBody(quote, header.GetHeader())
	if err != nil {
		return fmt.Errorf("could not get message digest for verification: %v", err)
	}
	hashed := sha256.Sum256(message)
	if !ecdsa.VerifyASN1(attestPublicKey, hashed[:], signature) {
		return verify.ErrHashVerificationFail
	}
	qe := signedData.GetCertificationData().GetQeReportCertificationData()
	if err := qeReportSignature(qe, e.pck); err != nil {
		return fmt.Errorf("error verifying QE report signature: %v", err)
	}
	if err := verifyHash256(signedData); err != nil {
		return fmt.Errorf("error verifying QE report data: %v", err)
	}
	switch q := quote.(type) {
	case *pb.QuoteV4:
		err = verifyTdQuoteBody(q.GetTdQuoteBody(), e.col.tcbInfo.TcbInfo, e.ext)
	case *pb.QuoteV5:
		err = verifyTdQuoteBody(q.GetTdQuoteBodyDescriptor().GetTdQuoteBodyV5(), e.col.tcbInfo.TcbInfo, e.ext)
	default:
		return fmt.Errorf("unsupported quote type: %T", quote)
	}
	if err != nil {
		return err
	}
	return verifyQeReport(qe.GetQeReport(), &e.col.qeIdentity.EnclaveIdentity)
}

// levels is SupportedTcbLevelsFromCollateral: the matching TDX TCB level
// and QE TCB level (err non-nil when either has none).
func levels(quote any, e *verifiedEntry) (pcs.TcbLevel, pcs.TcbLevel, error) {
	sd, ok := quote.(interface {
		GetSignedData() *pb.Ecdsa256BitQuoteV4AuthData
	})
	if !ok {
		return pcs.TcbLevel{}, pcs.TcbLevel{}, fmt.Errorf("unsupported quote type: %T", quote)
	}
	var tdxLvl pcs.TcbLevel
	var tcbErr error
	switch q := quote.(type) {
	case *pb.QuoteV4:
		tdxLvl, tcbErr = readTcbInfoTcbStatus(e.col.tcbInfo.TcbInfo, q.GetTdQuoteBody(), e.ext)
	case *pb.QuoteV5:
		tdxLvl, tcbErr = readTcbInfoTcbStatus(e.col.tcbInfo.TcbInfo, q.GetTdQuoteBodyDescriptor().GetTdQuoteBodyV5(), e.ext)
	default:
		return pcs.TcbLevel{}, pcs.TcbLevel{}, fmt.Errorf("unsupported quote type %T", quote)
	}
	qeLvl, qeErr := readQeTcbStatus(e.col.qeIdentity.EnclaveIdentity.TcbLevels, sd.GetSignedData().GetCertificationData().GetQeReportCertificationData().GetQeReport().GetIsvSvn())
	switch {
	case tcbErr != nil && qeErr != nil:
		return tdxLvl, qeLvl, fmt.Errorf("%v; %v", tcbErr, qeErr)
	case tcbErr != nil:
		return tdxLvl, qeLvl, tcbErr
	}
	return tdxLvl, qeLvl, qeErr
}

const pubKeySize = 64

func bytesToEcdsaPubKey(b []byte) (*ecdsa.PublicKey, error) {
	if len(b) != pubKeySize {
		return nil, verify.ErrPublicKeySize
	}
	pub := &ecdsa.PublicKey{
		Curve: elliptic.P256(),
		X:     new(big.Int).SetBytes(b[0 : pubKeySize/2]),
		Y:     new(big.Int).SetBytes(b[pubKeySize/2 : pubKeySize]),
	}
	if !pub.Curve.IsOnCurve(pub.X, pub.Y) {
		return nil, fmt.Errorf("public key is not on curve %q", pub.Curve.Params().Name)
	}
	return pub, nil
}

func headerAndBody(quote any, header *pb.Header) ([]byte, error) {
	headerBytes, err := abi.HeaderToAbiBytes(header)
	if err != nil {
		return nil, fmt.Errorf("could not convert header to ABI bytes: %v", err)
	}
	switch q := quote.(type) {
	case *pb.QuoteV4:
		b, err := abi.TdQuoteBodyToAbiBytes(q.GetTdQuoteBody())
		if err != nil {
			return nil, fmt.Errorf("could not convert TD Quote Body to ABI bytes: %v", err)
		}
		return append(headerBytes, b...), nil
	case *pb.QuoteV5:
		b, err := abi.TdQuoteBodyDescriptorToAbiBytes(q.GetTdQuoteBodyDescriptor())
		if err != nil {
			return nil, fmt.Errorf("could not convert TD Quote Body Descriptor to ABI bytes: %v", err)
		}
		return append(headerBytes, b...), nil
	default:
		return nil, fmt.Errorf("unsupported quote type: %T", quote)
	}
}

func qeReportSignature(qe *pb.QEReportCertificationData, pck *x509.Certificate) error {
	raw, err := abi.EnclaveReportToAbiBytes(qe.GetQeReport())
	if err != nil {
		return fmt.Errorf("could not parse QE report: %v", err)
	}
	der, err := abi.SignatureToDER(qe.GetQeReportSignature())
	if err != nil {
		return fmt.Errorf("unable to convert QE report's signature to DER format: %v", err)
	}
	if err := pck.CheckSignature(x509.ECDSAWithSHA256, raw, der); err != nil {
		return fmt.Errorf("QE report's signature verification using PCK Leaf Certificate failed: %v", err)
	}
	return nil
}

func verifyHash256(signedData *pb.Ecdsa256BitQuoteV4AuthData) error {
	qe := signedData.GetCertificationData().GetQeReportCertificationData()
	qeReportData := qe.GetQeReport().GetReportData()
	h := sha256.New()
	h.Write(signedData.GetEcdsaAttestationKey())
	h.Write(qe.GetQeAuthData().GetData())
	want := h.Sum(nil)
	if len(qeReportData) < len(want) {
		return verify.ErrSHA56VerificationFail
	}
	want = append(want, make([]byte, len(qeReportData)-len(want))...)
	if !bytes.Equal(want, qeReportData) {
		return verify.ErrSHA56VerificationFail
	}
	return nil
}

func applyMask(a, b []byte) []byte {
	data := make([]byte, len(a))
	for i := range a {
		data[i] = a[i] & b[i]
	}
	return data
}

func verifyTdQuoteBody(body any, tcbInfo pcs.TcbInfo, ext *pcs.PckExtensions) error {
	qb, ok := body.(interface {
		GetMrSignerSeam() []byte
		GetSeamAttributes() []byte
	})
	if !ok {
		return fmt.Errorf("unsupported type for tdQuoteBody: %T", body)
	}
	mrSignerSeam, seamAttributes := qb.GetMrSignerSeam(), qb.GetSeamAttributes()
	if !strings.EqualFold(ext.FMSPC, tcbInfo.Fmspc) {
		return fmt.Errorf("FMSPC from PCK Certificate(%q) is not equal to FMSPC value from Intel PCS's reported TDX TCB info(%q)", ext.FMSPC, tcbInfo.Fmspc)
	}
	if ext.PCEID != tcbInfo.PceID {
		return fmt.Errorf("PCEID from PCK Certificate(%q) is not equal to PCEID from Intel PCS's reported TDX TCB info(%q)", ext.PCEID, tcbInfo.PceID)
	}
	if !bytes.Equal(tcbInfo.TdxModule.Mrsigner.Bytes, mrSignerSeam) {
		return fmt.Errorf("MRSIGNERSEAM value from TD Quote Body(%q) is not equal to TdxModule.Mrsigner field in Intel PCS's reported TDX TCB info(%q)", hex.EncodeToString(mrSignerSeam), hex.EncodeToString(tcbInfo.TdxModule.Mrsigner.Bytes))
	}
	if len(tcbInfo.TdxModule.AttributesMask.Bytes) != len(seamAttributes) {
		return fmt.Errorf("size of SeamAttributes from TD Quote Body(%d) is not equal to size of TdxModule.AttributesMask in Intel PCS's reported TDX TCB info(%d)", len(tcbInfo.TdxModule.AttributesMask.Bytes), len(seamAttributes))
	}
	masked := applyMask(tcbInfo.TdxModule.AttributesMask.Bytes, seamAttributes)
	if !bytes.Equal(tcbInfo.TdxModule.Attributes.Bytes, masked) {
		return fmt.Errorf("AttributesMask value(%q) is not equal to TdxModule.Attributes field in Intel PCS's reported TDX TCB info(%q)", hex.EncodeToString(masked), hex.EncodeToString(tcbInfo.TdxModule.Attributes.Bytes))
	}
	if err := checkTcbInfoTcbStatus(tcbInfo, body, ext); err != nil {
		return fmt.Errorf("TDX TCB info reported by Intel PCS failed TCB status check: %v", err)
	}
	return nil
}

func verifyQeReport(qeReport *pb.EnclaveReport, id *pcs.EnclaveIdentity) error {
	if len(id.MiscselectMask.Bytes) != 4 {
		return fmt.Errorf("MISCSELECTMask field size(%d) in Intel PCS's reported QE Identity is not equal to expected size(4)", len(id.MiscselectMask.Bytes))
	}
	if len(id.Miscselect.Bytes) != 4 {
		return fmt.Errorf("MISCSELECT field size(%d) in Intel PCS's reported QE Identity is not equal to expected size(4)", len(id.Miscselect.Bytes))
	}
	miscSelectMask := binary.LittleEndian.Uint32(id.MiscselectMask.Bytes)
	miscSelect := binary.LittleEndian.Uint32(id.Miscselect.Bytes)
	miscSelectMask = qeReport.GetMiscSelect() & miscSelectMask
	if miscSelectMask != miscSelect {
		return fmt.Errorf("MISCSELECT value(%v) from Intel PCS's reported QE Identity is not equal to MISCSELECTMask value(%v)", miscSelect, miscSelectMask)
	}
	if len(id.AttributesMask.Bytes) != len(qeReport.GetAttributes()) {
		return fmt.Errorf("size of AttributesMask value(%d) in Intel PCS's reported QE Identity is not equal to size of SeamAttributes value(%d) in QE Report", len(id.AttributesMask.Bytes), len(qeReport.GetAttributes()))
	}
	masked := applyMask(id.AttributesMask.Bytes, qeReport.GetAttributes())
	if !bytes.Equal(id.Attributes.Bytes, masked) {
		return fmt.Errorf("AttributesMask value(%v) is not equal to Attributes value(%v) in Intel PCS's reported QE Identity", masked, id.Attributes)
	}
	if !bytes.Equal(id.Mrsigner.Bytes, qeReport.GetMrSigner()) {
		return fmt.Errorf("MRSIGNER value(%q) in QE Report is not equal to MRSIGNER value(%q) in Intel PCS's reported QE Identity", hex.EncodeToString(qeReport.GetMrSigner()), id.Mrsigner)
	}
	if qeReport.GetIsvProdId() != uint32(id.IsvProdID) {
		return fmt.Errorf("ISV PRODID value(%v) in QE Report is not equal to ISV PRODID value(%v) in Intel PCS's reported QE Identity", qeReport.GetIsvProdId(), id.IsvProdID)
	}
	if err := checkQeTcbStatus(id.TcbLevels, qeReport.GetIsvSvn()); err != nil {
		return fmt.Errorf("QE Identity reported by Intel PCS failed TCB status check: %v", err)
	}
	return nil
}

func isCPUSvnHigherOrEqual(pckCertCPUSvnComponents []byte, sgxTcbcomponents []pcs.TcbComponent) bool {
	if len(pckCertCPUSvnComponents) != len(sgxTcbcomponents) {
		return false
	}
	for i := range pckCertCPUSvnComponents {
		if pckCertCPUSvnComponents[i] < sgxTcbcomponents[i].Svn {
			return false
		}
	}
	return true
}

func isTdxTcbSvnHigherOrEqual(teeTcbSvn []byte, tdxTcbcomponents []pcs.TcbComponent) bool {
	if len(teeTcbSvn) != len(tdxTcbcomponents) {
		return false
	}
	start := 0
	if teeTcbSvn[1] > 0 {
		start = 2
	}
	for i := start; i < len(teeTcbSvn); i++ {
		if teeTcbSvn[i] < tdxTcbcomponents[i].Svn {
			return false
		}
	}
	return true
}

func getMatchingTdxModuleTcbLevel(ids []pcs.TdxModuleIdentity, teeTcbSvn []byte) (*pcs.TcbLevel, error) {
	version := teeTcbSvn[1:2]
	id := "TDX_" + hex.EncodeToString(version)
	isvSvn := uint32(teeTcbSvn[0])
	for _, m := range ids {
		if id == m.ID {
			for _, lvl := range m.TcbLevels {
				if isvSvn >= lvl.Tcb.Isvsvn {
					return &lvl, nil
				}
			}
			return nil, fmt.Errorf("could not find a TDX Module Identity TCB Level matching the TDX Module's ISVSVN (%d)", isvSvn)
		}
	}
	return nil, fmt.Errorf("could not find a TDX Module Identity (%q) matching the given TEE TDX version (%q)", id, version)
}

func getTeeTcbSvn(body any) ([]byte, error) {
	switch b := body.(type) {
	case *pb.TDQuoteBody:
		return b.GetTeeTcbSvn(), nil
	case *pb.TDQuoteBodyV5:
		return b.GetTeeTcbSvn(), nil
	default:
		return nil, fmt.Errorf("unsupported type for tdQuoteBody: %T", body)
	}
}

func getMatchingTcbLevel(tcbLevels []pcs.TcbLevel, body any, pceSvn uint16, cpuSvn []byte) (pcs.TcbLevel, error) {
	teeTcbSvn, err := getTeeTcbSvn(body)
	if err != nil {
		return pcs.TcbLevel{}, err
	}
	for _, lvl := range tcbLevels {
		if isCPUSvnHigherOrEqual(cpuSvn, lvl.Tcb.SgxTcbcomponents) && pceSvn >= lvl.Tcb.Pcesvn &&
			isTdxTcbSvnHigherOrEqual(teeTcbSvn, lvl.Tcb.TdxTcbcomponents) {
			return lvl, nil
		}
	}
	return pcs.TcbLevel{}, fmt.Errorf("no matching TCB level found")
}

func readQeTcbStatus(tcbLevels []pcs.TcbLevel, isvsvn uint32) (pcs.TcbLevel, error) {
	for _, lvl := range tcbLevels {
		if lvl.Tcb.Isvsvn <= isvsvn {
			return lvl, nil
		}
	}
	return pcs.TcbLevel{}, fmt.Errorf("no matching QE TCB level found")
}

func checkQeTcbStatus(tcbLevels []pcs.TcbLevel, isvsvn uint32) error {
	found, err := readQeTcbStatus(tcbLevels, isvsvn)
	if err != nil {
		return err
	}
	if found.TcbStatus == pcs.TcbComponentStatusOutOfDate {
		return verify.ErrEnclaveTcbStatus
	}
	if found.TcbStatus != pcs.TcbComponentStatusUpToDate {
		return fmt.Errorf("QE TCB Status is not %q, found %q", pcs.TcbComponentStatusUpToDate, found.TcbStatus)
	}
	return nil
}

func readTcbInfoTcbStatus(tcbInfo pcs.TcbInfo, body any, ext *pcs.PckExtensions) (pcs.TcbLevel, error) {
	lvl, err := getMatchingTcbLevel(tcbInfo.TcbLevels, body, ext.TCB.PCESvn, ext.TCB.CPUSvnComponents)
	if err != nil {
		return pcs.TcbLevel{}, err
	}
	teeTcbSvn, err := getTeeTcbSvn(body)
	if err != nil {
		return pcs.TcbLevel{}, err
	}
	if len(teeTcbSvn) != abi.TeeTcbSvnSize {
		return pcs.TcbLevel{}, fmt.Errorf("teeTcb has incorrect size: %d, expected size: %d", len(teeTcbSvn), abi.TeeTcbSvnSize)
	}
	if teeTcbSvn[1] > 0 {
		m, err := getMatchingTdxModuleTcbLevel(tcbInfo.TdxModuleIdentities, teeTcbSvn)
		if err != nil {
			return pcs.TcbLevel{}, err
		}
		return *m, nil
	}
	return lvl, nil
}

func checkTcbInfoTcbStatus(tcbInfo pcs.TcbInfo, body any, ext *pcs.PckExtensions) error {
	found, err := readTcbInfoTcbStatus(tcbInfo, body, ext)
	if err != nil {
		return err
	}
	if found.TcbStatus == pcs.TcbComponentStatusOutOfDate {
		return verify.ErrTdxTcbStatus
	}
	if found.TcbStatus != pcs.TcbComponentStatusUpToDate {
		return fmt.Errorf("TDX TCB Status is not %q, found %q", pcs.TcbComponentStatusUpToDate, found.TcbStatus)
	}
	return nil
}
